"""What a failed end-to-end test prints from its run's directory, which goes with the
test (CI keeps only the output): every daemon's warnings and errors merged in time
order, so that a failure reads as one story across the nodes."""

import pathlib


def merged_warnings(directory, last=60, glob="gossipd-*.log"):
    """The last `last` warning and error lines of the daemons' logs in `directory`,
    each prefixed with its log's name, in time order (the log lines start with the
    date and time)."""
    lines = []
    for f in sorted(pathlib.Path(directory).glob(glob)):
        lines += [f"{f.stem}: {line}" for line in f.read_text(errors="replace").splitlines()
                  if "[warning]" in line or "[error]" in line]
    lines.sort(key=lambda line: line.split(": ", 1)[1][:23])
    return "\n".join(lines[-last:])
