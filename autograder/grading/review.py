"""A notebook whose tests could not be trusted goes to a human: flagged for manual grading in the gradebook."""

from nbgrader.api import Gradebook

from .notebook import FINDINGS
from .step import Step


class FlagForReview(Step):
    """After SaveAutoGrades: if the execute step found the tests tampered with, every grade needs a human."""

    def preprocess(self, nb, resources):
        if nb.metadata.get(FINDINGS, {}).get("tampered"):
            info = resources["nbgrader"]
            with Gradebook(info["db_url"]) as gb:
                submitted = gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"])
                for grade in submitted.grades:
                    grade.needs_manual_grade = True
                gb.db.commit()
        return nb, resources
