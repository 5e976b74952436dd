"""Code that runs inside the student's kernel, sent by integrity.py as text (the kernel cannot import the grader).

Each module is Python of its own, linted and tested here; in the kernel it runs in a namespace of its own that the
notebook cannot reach, each `from .other import ...` replaced by the other module's code (integrity.in_kernel). It
imports only the standard library, and its functions carry no annotations: the check's module runs afresh in every
check, where an annotation would be evaluated with built-ins the notebook may have replaced.
"""
