"""Feedback without hidden tests: not their code, nor the lines a traceback or an output would quote from them."""

from nbformat import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

from torchcourse.check import HIDDEN  # the one definition of the hidden-test markers

NOTICE = "# Hidden tests ran here when your notebook was graded; their code is not shown.\n"


def hidden_lines(source: str) -> list[str]:
    """Lines of the hidden regions worth hiding (long enough to recognise), markers left out."""
    return [line.strip() for block in HIDDEN.findall(source) for line in block.splitlines()[1:-1]
            if len(line.strip()) >= 8]


def redact(text: str, secret: list[str]) -> str:
    """`text` with each line that quotes a hidden line replaced."""
    return "\n".join("[a line of the hidden tests]" if any(s in line for s in secret) else line
                     for line in text.split("\n"))


class HideHiddenTests(NbGraderPreprocessor):
    """In each cell with hidden tests: the code of the hidden regions, and every output but the error's message, go."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code" or not HIDDEN.search(cell.source):
            return cell, resources
        secret = hidden_lines(cell.source)
        cell.source = HIDDEN.sub(NOTICE, cell.source)
        # A traceback quotes the failing hidden line, and an answer can print what its caller's code is, so only
        # the error's name and message are kept (hidden asserts carry messages written for students).
        cell.outputs = [NotebookNode(output_type="error", ename=o["ename"], evalue=redact(o["evalue"], secret),
                             traceback=[f"{o['ename']}: {redact(o['evalue'], secret)}"])
                        for o in cell.outputs if o.get("output_type") == "error"]
        return cell, resources
