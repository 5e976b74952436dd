"""Regenerate data/digits.csv.gz from the copy that scikit-learn bundles.

    python -m venv /tmp/sk && /tmp/sk/bin/pip install scikit-learn && /tmp/sk/bin/python data/make_digits.py

scikit-learn is needed only here, not by the course. The output is byte-for-byte reproducible
(gzip without a timestamp), so a regenerated file shows no diff.
"""

import gzip
from pathlib import Path

from sklearn.datasets import load_digits

OUT = Path(__file__).with_name("digits.csv.gz")


def main() -> None:
    digits = load_digits()
    header = ",".join([f"pixel_{i:02d}" for i in range(64)] + ["label"])
    rows = [",".join(str(int(v)) for v in (*pixels, label)) for pixels, label in zip(digits.data, digits.target)]
    with gzip.GzipFile(OUT, "wb", mtime=0) as f:  # mtime=0: the same bytes every time
        f.write(("\n".join([header, *rows]) + "\n").encode())
    print(f"wrote {OUT} ({len(rows)} images of 8x8 pixels in 0..16, labels 0..9)")


if __name__ == "__main__":
    main()
