"""The base of the grader's own nbgrader steps (preprocessors), configured as nbgrader's own are."""

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import List


class Step(NbGraderPreprocessor):
    """An nbgrader step of the grader's (base it first: `class GuardedExecute(Step, Execute)`). nbconvert's exporters
    configure display_data_priority for every NbConvertBase, which NbGraderPreprocessor declares again, not
    configurable: traitlets then writes "Config option `display_data_priority` not recognized by <step>" into every
    grading's log. Configurable here, as nbgrader's own GetGrades has it."""
    display_data_priority = List(NbGraderPreprocessor.display_data_priority.default_value).tag(config=True)
