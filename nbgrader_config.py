"""nbgrader's view of this repository: solutions/ holds the sources, notebooks/ the student versions."""

c = get_config()  # noqa: F821 (nbgrader provides it)
c.CourseDirectory.course_id = "pytorch-course"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
# The instructor's working folders and gradebook live under autograder/ and are not committed.
c.CourseDirectory.submitted_directory = "autograder/submitted"
c.CourseDirectory.autograded_directory = "autograder/autograded"
c.CourseDirectory.feedback_directory = "autograder/feedback"
c.CourseDirectory.db_url = "sqlite:///autograder/gradebook.db"
# Our tests fail by raising, never by printing: drop stderr before grading so that a warning
# (a PyTorch UserWarning, say) printed by a correct answer does not zero its test cell.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"[\s\S]"
