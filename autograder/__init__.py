"""Bulk grading of a class with nbgrader as the engine: `python -m autograder grade ASSIGNMENT SUBMISSIONS`."""
