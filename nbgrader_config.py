"""nbgrader's view of this repository, and how it grades on every path: `make grade`, `nbgrader autograde`, formgrader."""

c = get_config()  # noqa: F821 (nbgrader provides it)
c.CourseDirectory.course_id = "pytorch-course"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
# The instructor's working folders and gradebook live under autograder/ and are not committed.
c.CourseDirectory.submitted_directory = "autograder/submitted"
c.CourseDirectory.autograded_directory = "autograder/autograded"
c.CourseDirectory.feedback_directory = "autograder/feedback"
c.CourseDirectory.db_url = "sqlite:///autograder/gradebook.db"

# Each kernel runs in a sandbox that sees the Python environment and these folders only (autograder/kernel/sandbox.py),
# and the tests are checked to run as written (autograder/grading/execute.py). A notebook that tampers with them goes to a human.
c.Autograde.autograde_preprocessors = [
    "autograder.grading.execute.GuardedExecute", "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor", "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades", "autograder.grading.review.FlagForReview",
    "nbgrader.preprocessors.AssignLatePenalties", "nbgrader.preprocessors.CheckCellMetadata"]
c.ClearMetadataPreprocessor.preserve_nb_metadata_mask = {("language_info", "name"), "autograder"}
c.SandboxedKernelManager.read_only = ["data", "torchcourse"]
c.SandboxedKernelManager.memory_gib = 4
c.Execute.timeout = 120  # seconds a cell may run; generous, for a loaded machine
# Our tests fail by raising, never by printing: drop stderr before grading so that a warning
# (a PyTorch UserWarning, say) printed by a correct answer does not zero its test cell.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"[\s\S]"
# Feedback shows each test's name, points and message, never hidden test code (autograder/grading/feedback.py), under a
# summary of each exercise made from what it shows (so after HideHiddenTests), the lesson's cells folded away.
c.GenerateFeedback.preprocessors = ["nbgrader.preprocessors.GetGrades", "autograder.grading.feedback.HideHiddenTests",
                                    "autograder.grading.feedback.ExerciseSummary", "autograder.grading.feedback.FoldLessons",
                                    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor"]
c.GenerateFeedback.exporter_class = "autograder.grading.feedback.FeedbackPage"  # nbconvert's page, without its slow rewrite
# nbgrader's feedback page opening with the summary, without MathJax from a CDN (autograder/grading/templates/feedback_page)
c.FeedbackPage.template_name = "feedback_page"
# Pages that show a hand-in run none of its code: every HTMLExporter reading this file (the feedback's, and formgrader's
# view of a submission, served from the Jupyter server's own origin) sanitises markdown and outputs' HTML and leaves
# JavaScript and widget outputs out (nbconvert's sanitize_html, two of its filters replaced: autograder/grading/feedback.py).
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.filters = {"markdown2html": "autograder.grading.feedback.SanitisedMarkdown",
                          "clean_html": "autograder.grading.feedback.sanitised"}
