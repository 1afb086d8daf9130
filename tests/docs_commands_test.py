#!/usr/bin/env python3
"""The commands README.md and docs/*.md show, checked against the programs they name:

  - every flag a shown gossipd, gossipctl SUBCOMMAND or gossip-train command uses is one
    that program's --help lists (a renamed or removed flag fails here, naming the page
    and the line);
  - every shown gossipd command that is complete (no `...`, no [optional] or a|b
    alternatives, no --peers-from or --join, which need a real hostfile, DNS or cluster:
    the Deploy.* and Churn.* tests run those) passes `gossipd --check`: its whole
    configuration is valid.

The commands that train (the README's `build/bin/gossipctl cluster ...` lines and their
figures) are read from the README and run by tests/integration/training_test.cc, which
checks each figure; this one starts nothing.

    /usr/bin/python3 tests/docs_commands_test.py --build build
"""

import argparse
import pathlib
import re
import shlex
import subprocess
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
PROGRAMS = ("gossipd", "gossipctl", "gossip-train")


def shown_commands():
    """(page, line number, words) of every gossipd, gossipctl and gossip-train command in
    the pages' code blocks, continuation lines joined, prompts and comments dropped."""
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    for page in pages:
        in_block, joined, first = False, "", 0
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.strip().startswith("```"):
                in_block, joined = not in_block, ""
                continue
            if not in_block:
                continue
            text = line.strip()
            if not joined:
                first = number
            if text.endswith("\\"):
                joined += text[:-1] + " "
                continue
            text, joined = joined + text, ""
            text = re.sub(r"^\$ ", "", text)
            text = re.sub(r"\s#.*$", "", text)  # a comment
            for command in re.split(r";|&&|\s\|\s", text):
                try:
                    words = shlex.split(command)
                except ValueError:
                    words = command.split()
                if words and pathlib.PurePath(words[0]).name in PROGRAMS:
                    yield page.relative_to(ROOT), first, words


def flags_of(words):
    """The --flags a command's words use, up to a `--` that starts another command."""
    found = []
    for w in words[1:]:
        if w == "--":
            break
        for m in re.finditer(r"(?:^|\[)(--[a-z0-9][a-z0-9-]*)", w):
            found.append(m.group(1))
    return found


class ShownCommands(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.commands = list(shown_commands())
        cls.helps = {}

    def help_of(self, program, subcommand):
        key = (program, subcommand)
        if key not in self.helps:
            argv = [str(BUILD / "bin" / program)] + ([subcommand] if subcommand else []) + ["--help"]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            self.assertEqual(done.returncode, 0, f"{argv}: {done.stderr}")
            self.helps[key] = set(re.findall(r"--[a-z0-9][a-z0-9-]*", done.stdout))
        return self.helps[key]

    def test_the_pages_show_commands(self):
        # A parser that found none would pass everything below.
        programs = {pathlib.PurePath(w[0]).name for _, _, w in self.commands}
        self.assertEqual(programs, set(PROGRAMS), self.commands)
        self.assertGreater(len(self.commands), 30)

    def test_every_flag_shown_is_one_the_program_takes(self):
        for page, line, words in self.commands:
            program = pathlib.PurePath(words[0]).name
            subcommand = words[1] if program == "gossipctl" and len(words) > 1 and \
                not words[1].startswith("-") else None
            known = self.help_of(program, subcommand)
            for flag in flags_of(words):
                with self.subTest(page=str(page), line=line, flag=flag):
                    self.assertIn(flag, known, f"{page}:{line}: {' '.join(words)}")

    def test_every_complete_gossipd_command_is_a_valid_configuration(self):
        checked = 0
        for page, line, words in self.commands:
            if pathlib.PurePath(words[0]).name != "gossipd" or "--id" not in words:
                continue
            if any(w == "..." or w.startswith("[") or "|" in w for w in words) or \
                    {"--peers-from", "--join"} & set(words):
                continue
            done = subprocess.run([str(BUILD / "bin" / "gossipd"), *words[1:], "--check"],
                                  capture_output=True, text=True, timeout=30)
            with self.subTest(page=str(page), line=line):
                self.assertEqual(done.returncode, 0, f"{page}:{line}: {' '.join(words)}\n{done.stderr}")
                self.assertIn("the configuration is valid", done.stdout)
            checked += 1
        self.assertGreater(checked, 0, "no complete gossipd command was found to check")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=str(BUILD))
    args, rest = p.parse_known_args()
    BUILD = pathlib.Path(args.build)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # ctest_unittest
    import ctest_unittest
    ctest_unittest.run([sys.argv[0]] + rest)
