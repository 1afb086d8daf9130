"""unittest.main for the suite's Python tests, with ctest's exit codes: 0 when every
test passed, 1 when one failed or none ran, 77 (SKIP_RETURN_CODE: ctest shows
"Skipped") when any test skipped, its reason printed, so that a skip inside a suite
is not counted as a pass."""

import sys
import unittest


def run(argv):
    result = unittest.main(module="__main__", argv=argv, exit=False).result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.testsRun == 0:
        print("no test ran", file=sys.stderr)
        sys.exit(1)
    if result.skipped:
        for test, reason in result.skipped:
            print(f"skipped {test.id()}: {reason}")
        sys.exit(77)
    sys.exit(0)
