"""Feedback without hidden tests: no output made after the first hidden test cell started, except test verdicts.

Once hidden tests have reached the kernel, student code may have recorded them, and anything it prints from then on
(in any cell, in an error it raises inside a test, in a widget) could carry them. So from the first hidden test cell
on, the feedback keeps, for each test cell, whether it failed, the exception's name (a built-in one, else "Error")
and the message only if it is one the instructor wrote in that cell, with the values filled into it left out.
Earlier cells keep their outputs: the execute step (execute.py) stops later messages from changing them. A visible
test's own error is told as a second run without the hidden tests raised it (grade_one.visible_errors), where there
was one: that kernel never held a hidden test. A cell stopped at the time limit says so, and names the limit.
The first cell then sums up each exercise (ExerciseSummary), from the outputs as the feedback shows them, and the
lesson's cells are folded away (FoldLessons; the page's template, templates/feedback_page, draws both).

A page that shows a hand-in runs none of it: nbgrader_config.py has every HTMLExporter (the feedback's, formgrader's
view of a submission) sanitise markdown and outputs' HTML (SanitisedMarkdown, sanitised) and leave JavaScript and widget
outputs out, and the feedback page also carries a policy that lets no script run (PAGE_POLICY).
"""

import ast
import builtins
import html
import json
import re
from functools import lru_cache
from pathlib import Path

import bleach
import nbgrader
from bleach.css_sanitizer import CSSSanitizer
from jinja2 import BytecodeCache, FileSystemLoader, PrefixLoader, pass_context
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import default, validate
from traitlets.config import LoggingConfigurable

from torchcourse.format import HIDDEN, answer_cells, grading, test_cells  # HIDDEN: the one definition of the markers

from .notebook import FINDINGS, NOT_ANSWERED, PAGE_POLICY, TIMED_OUT, VISIBLE_RUN, error_output, exercise_name, first_failure, is_test, unanswered
from .step import Step

NOTICE = "# Hidden tests ran here when your notebook was graded; their code is not shown.\n"
WITHHELD = "(output not shown: it was made after hidden tests had run)"
UNKNOWN_MESSAGE = "(message not shown: it is not one of this test's own)"
# A visible test's error whose message the page cannot show (it was raised after hidden tests had run, and no run
# without them raised it): the student can run the test in their notebook and read it there.
VISIBLE_UNKNOWN = ("(message not shown: hidden tests had run before this test when it failed; run this test in your "
                   "notebook to see its message)")
VISIBLE_RUN_NOTE = ("This test's own error, as a second run of your notebook without the hidden tests raised it\n"
                    "(in the graded run, hidden tests had run before this test):\n")
ERROR_CHARS, TRACEBACK_LINES = 4000, 60  # of a kernel's error the page shows: characters of a line, lines
PAGE = "autograder_page"  # a cell's metadata for the page's template: the summary's, and where a lesson's fold is
TEMPLATES = Path(__file__).parent / "templates"  # the feedback page's template (feedback_page) and its macros
NBGRADER_TEMPLATES = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"
# Characters markdown would read as markup, written as entities so that a message shows as it is (html.escape does
# &, <, >): a table's column bar, emphasis, code, links, math, escapes.
MARKDOWN_LITERAL = str.maketrans({c: f"&#{ord(c)};" for c in "|*_`[]$\\~#!"})
NO_ALT = re.compile(r"<img(?![^>]*\balt=)", re.IGNORECASE)
ERROR_NAMES = {name for name, value in vars(builtins).items() if isinstance(value, type)
               and issubclass(value, BaseException)} | {"CellTimeoutError", "DeadKernelError"}
# What a lesson's markdown renders to (mistune's HTML, Pygments' code blocks, tables) and a plain HTML output needs, and
# nothing a browser runs or fetches: no script, event handler, frame, form, style sheet, inline SVG or image (formgrader
# would load a hand-in's image from anywhere; a plot is an output, which the template draws itself); links by http(s),
# mailto or a relative address (bleach's protocols). Any other tag is shown as text, any other attribute left out.
SAFE_TAGS = bleach.ALLOWED_TAGS | {"p", "div", "span", "pre", "br", "hr", "del", "s", "sub", "sup", "kbd",
                                   "h1", "h2", "h3", "h4", "h5", "h6", "dl", "dt", "dd",
                                   "table", "caption", "thead", "tbody", "tfoot", "tr", "th", "td"}
SAFE_ATTRIBUTES = {**bleach.ALLOWED_ATTRIBUTES, "*": ["class"], "ol": ["start"],
                   **{f"h{level}": ["id"] for level in range(1, 7)},  # nbconvert's heading anchors
                   "th": ["style"], "td": ["style"]}  # a markdown table's alignment, the one style allowed
SAFE_STYLES = CSSSanitizer(allowed_css_properties=["text-align"])
HEAD = re.compile(r"<head\b[^>]*>", re.IGNORECASE)


@lru_cache(maxsize=4096)
def message_templates(source: str) -> tuple[tuple[re.Pattern, str], ...]:
    """The failure messages written in a test cell's code: (a pattern matching it, the message with values left out).

    From `assert ..., MSG`, `raise Error(MSG)` and `msg=MSG` (assert_close's, a lambda returning MSG included),
    where MSG is a string or an f-string.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and node.msg is not None:
            found.append(node.msg)
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            found.append(node.exc.args[0])
        elif isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "msg":
                    found.append(keyword.value.body if isinstance(keyword.value, ast.Lambda) else keyword.value)
    templates = []
    for expr in found:
        parts = [expr] if isinstance(expr, ast.Constant) else getattr(expr, "values", None)
        if not parts or not all(isinstance(p, (ast.Constant, ast.FormattedValue)) for p in parts):
            continue
        literal = [p.value if isinstance(p, ast.Constant) else None for p in parts]
        if not all(isinstance(v, str) or v is None for v in literal):
            continue
        pattern = "".join(re.escape(v) if v is not None else "(.*?)" for v in literal)
        templates.append((re.compile(pattern, re.S), "".join(v if v is not None else "…" for v in literal)))
    return tuple(templates)


def shown(source: str) -> str:
    """A code cell's source as the feedback shows it: each hidden test block replaced by a notice."""
    return HIDDEN.sub(NOTICE, source)


def verdict(output, templates, hidden: bool = True) -> NotebookNode:
    """A test's error, told without anything the kernel chose: a known exception name, the instructor's message."""
    ename = output.get("ename") if output.get("ename") in ERROR_NAMES else "Error"
    evalue = output.get("evalue") or ""
    shown = next((text for pattern, text in templates if pattern.fullmatch(evalue)), "" if not evalue else None)
    shown = (UNKNOWN_MESSAGE if hidden else VISIBLE_UNKNOWN) if shown is None else shown
    return NotebookNode(output_type="error", ename=ename, evalue=shown, traceback=[f"{ename}: {shown}"])


def kept_error(output) -> dict:
    """A kernel's error as a page may show it: the kernel's own words, each line and the number of lines bounded."""
    def cut(text) -> str:
        text = str(text or "")
        return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS - 1] + "…"

    lines = [cut(line) for line in (output.get("traceback") or [])[-TRACEBACK_LINES:]]
    return {"ename": cut(output.get("ename"))[:200], "evalue": cut(output.get("evalue")), "traceback": lines}


def time_limit(findings: dict, config) -> int | None:
    """The seconds a cell could run in grading: as the grading's execute step said (FINDINGS), or for a notebook run
    by nbgrader's own execute step, as that step reads the configuration."""
    return findings["timeout"] if "timeout" in findings else Execute(config=config).timeout


def stopped(cell) -> bool:
    """Whether nbgrader's execute step stopped this cell at the time limit."""
    return any(o.get("output_type") == "error" and o.get("ename") == TIMED_OUT for o in cell.get("outputs", []))


def stopped_at(limit) -> NotebookNode:
    return error_output(TIMED_OUT, f"this cell ran past the {limit} s time limit and was stopped")


class HideHiddenTests(Step):
    """Feedback preprocessor: hidden test code out, and no output made after the first hidden test but verdicts."""

    def preprocess(self, nb, resources):
        nb.metadata.pop("widgets", None)  # widget state can hold output made at any time
        findings = nb.metadata.get(FINDINGS, {})
        grader_verdicts, visible_run = findings.get("verdicts", {}), findings.get(VISIBLE_RUN, {})
        hidden = [i for i, cell in enumerate(nb.cells) if is_test(cell) and HIDDEN.search(cell.source)]
        first = hidden[0] if hidden else len(nb.cells)
        limit = time_limit(findings, self.config)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            source = cell.source
            cell.source = shown(source)
            if i < first:
                if stopped(cell):  # the limit said first; the kernel's traceback after it shows where it was
                    cell.outputs = [stopped_at(limit)] + [o for o in cell.outputs if o.get("ename") != TIMED_OUT]
                continue
            if cell.id in grader_verdicts:  # the grader's own message (TestsTampered, GradingStopped)
                ename, _, evalue = grader_verdicts[cell.id].partition(": ")
                cell.outputs = [NotebookNode(output_type="error", ename=ename, evalue=evalue,
                                             traceback=[grader_verdicts[cell.id]])]
            elif stopped(cell):
                cell.outputs = [stopped_at(limit)]
            elif is_test(cell):  # one verdict: a kernel can send a cell more errors than it raised
                errors = [o for o in cell.outputs if o.get("output_type") == "error"]
                visible = not HIDDEN.search(source)
                if errors and visible and cell.id in visible_run:  # the grader wrote it (kept_error), from a kernel
                    own = NotebookNode(output_type="error", **kept_error(visible_run[cell.id]))  # without hidden tests
                    cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=VISIBLE_RUN_NOTE), own]
                else:
                    cell.outputs = [verdict(errors[0], message_templates(source), hidden=not visible)] if errors else []
            elif cell.outputs:
                cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=WITHHELD + "\n")]
        return nb, resources


def wants_visible_run(graded, as_shown) -> list[str]:
    """Ids of the visible test cells whose error the feedback shows without its message (it was raised after hidden
    tests had run, and is none of the instructor's), from the graded notebook and HideHiddenTests' view of it: a run
    without the hidden tests may tell it (grade_one.visible_errors)."""
    return [cell.id for cell, seen in zip(graded.cells, as_shown.cells) if is_test(cell)
            and not HIDDEN.search(cell.source) and any(o.get("evalue") == VISIBLE_UNKNOWN for o in seen.outputs)]


def literal(text: str) -> str:
    """Text for a markdown cell, shown as it is: HTML escaped (markdown passes raw HTML through), markup neutral."""
    return html.escape(text, quote=False).translate(MARKDOWN_LITERAL)  # quote=True would write "&#x27;", with a #


class ExerciseSummary(Step):
    """Feedback preprocessor, after GetGrades and HideHiddenTests: a first cell with each exercise's points and first
    failure, read from the cells as this feedback shows them (so it holds nothing the feedback hides)."""

    def preprocess(self, nb, resources):
        rows = []
        for answer in answer_cells(nb):
            tests = test_cells(nb, grading(answer)["grade_id"])
            earned = sum(float(grading(t).get("score") or 0) for t in tests)  # GetGrades set score and points
            possible = sum(float(grading(t).get("points") or 0) for t in tests)
            failure = first_failure(tests)
            said = (NOT_ANSWERED if unanswered(failure) else f"<code>{literal(failure)}</code>" if failure
                    else "passed" if earned >= possible else "—")
            rows.append(f"| {literal(exercise_name(nb, answer))} | {earned:g} / {possible:g} | {said} |")
        if rows:
            ids, cell_id = {cell.get("id") for cell in nb.cells}, "exercise-summary"
            while cell_id in ids:  # a cell's id is unique in its notebook, and a student may have named one so
                cell_id += "-"
            table = "\n".join(["## Your results, exercise by exercise", "",
                               "| exercise | points | first failure |", "|---|---|---|", *rows])
            nb.cells.insert(0, NotebookNode(cell_type="markdown", id=cell_id, metadata={PAGE: {"summary": True}},
                                            source=table))
        return nb, resources


class FoldLessons(Step):
    """Feedback preprocessor, after ExerciseSummary: each run of the lesson's cells marked to be folded away in the page
    (templates/feedback_page draws a <details> around it). A lesson cell here is one that is neither graded, nor the
    markdown cell stating an exercise (the last one above its answer), nor the summary, and shows no error."""

    def preprocess(self, nb, resources):
        statements = set()
        for answer in answer_cells(nb):
            at = next(i for i, cell in enumerate(nb.cells) if cell is answer)
            above = next((c for c in reversed(nb.cells[:at]) if grading(c) or c.cell_type == "markdown"), None)
            if above is not None and not grading(above):
                statements.add(id(above))

        def lesson(cell) -> bool:
            return not (grading(cell) or id(cell) in statements or cell.metadata.get(PAGE, {}).get("summary")
                        or any(o.get("output_type") == "error" for o in cell.get("outputs", [])))

        run = []
        for cell in [*nb.cells, None]:
            if cell is not None and lesson(cell):
                run.append(cell)
                continue
            if run:
                run[0].metadata.setdefault(PAGE, {})["opens"] = len(run)
                run[-1].metadata.setdefault(PAGE, {})["closes"] = True
            run = []
        return nb, resources


@lru_cache(maxsize=4096)
def sanitised(markup) -> str:
    """Jinja filter `clean_html`, in place of nbconvert's (which shows a lesson's headings and paragraphs as text): HTML
    from a hand-in with nothing a browser would run. Kept: a lesson's markdown is alike in every hand-in, sanitised once
    in the batch's process (grade_one.warm_up)."""
    markup = markup.decode() if isinstance(markup, bytes) else str(markup)  # an SVG comes as bytes
    return bleach.clean(markup, tags=SAFE_TAGS, attributes=SAFE_ATTRIBUTES, css_sanitizer=SAFE_STYLES)


class SanitisedMarkdown(LoggingConfigurable):
    """Jinja filter `markdown2html`: the exporter's own (its settings, the cell's attachments), sanitised. nbconvert's
    templates sanitise markdown cells under `sanitize_html`, but nbgrader's feedback and formgrade templates render them
    themselves, without it: all of them go through this filter."""

    @pass_context  # as nbconvert's: Jinja hands it the template's context (the cell)
    def __call__(self, context, source):
        return sanitised(self.parent.markdown2html(context, source))

    jinja_pass_arg = __call__.jinja_pass_arg  # Jinja looks for it on the filter, here an instance, not on its __call__


class KeptHighlight(Highlight2HTML):
    """nbconvert's syntax highlighting (Pygments: most of a page's rendering), kept per cell source: the lesson's cells
    are alike in every hand-in, highlighted once in the batch's process (grade_one.warm_up), which each grading forks."""

    kept: dict[tuple, str] = {}

    def __call__(self, source, language=None, metadata=None):
        key = (source, language or self.pygments_lexer, (metadata or {}).get("magics_language"))  # all it reads
        if key not in self.kept:
            self.kept[key] = super().__call__(source, language, metadata)
        return self.kept[key]


class KeptTemplates(BytecodeCache):
    """Jinja's compiled templates, kept in memory by name and source: each grading makes a new exporter, whose new
    environment would parse and compile nbgrader's nine feedback templates again (0.1-0.2 s); the batch's process
    compiles them once (grade_one.warm_up), and each grading, forked from it, finds them here."""

    kept: dict[str, bytes] = {}

    def load_bytecode(self, bucket):
        if bucket.key in self.kept:
            bucket.bytecode_from_string(self.kept[bucket.key])

    def dump_bytecode(self, bucket):
        self.kept[bucket.key] = bucket.bytecode_to_string()


class FeedbackPage(HTMLExporter):
    """nbconvert's HTML page, without the BeautifulSoup pass that parses and rewrites the whole page (half a second of
    each hand-in's feedback), its templates compiled and its code highlighted once per batch (KeptTemplates,
    KeptHighlight). nbgrader's feedback template is the classic one, which has none of the lab template's
    classes that pass makes focusable; its one change left, an alt text on images without one, is made on the text."""

    kept_markdown: dict[tuple, str] = {}  # a lesson's markdown cells, alike in every hand-in: as KeptHighlight's code
    kept_cells: dict[str, str] = {}  # each cell's HTML by the cell and the page's settings (kept_cell)
    cell_context = ""  # what a cell's HTML depends on besides the cell: this exporter's settings, the notebook's language

    @default("extra_loaders")
    def _nbgraders_templates(self):
        # feedback_page extends nbgrader's feedback page, by the name nbgrader/feedback/index.html.j2 (by its own name,
        # index.html.j2, the search would find feedback_page's first)
        return [PrefixLoader({"nbgrader": FileSystemLoader(NBGRADER_TEMPLATES)})]

    @validate("extra_template_basedirs")
    def _with_ours(self, proposal):
        """Our templates' folder beside those configured (nbgrader's, where feedback_page's base is)."""
        return [*proposal["value"], *([str(TEMPLATES)] if str(TEMPLATES) not in proposal["value"] else [])]

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = KeptTemplates()
        environment.globals["kept_cell"] = self.kept_cell
        return environment

    def kept_cell(self, cell, caller):
        """The template's `{% call kept_cell(cell) %}`: the cell's HTML as the template draws it (`caller`), kept by
        the cell and the page's settings. A lesson's cells (its markdown, and the code cells a grading skips) are
        alike in every hand-in: drawn once in the batch's process (grade_one.warm_up), which each grading forks
        (0.2-0.4 ms a cell)."""
        key = f"{self.cell_context}\n{json.dumps(cell, sort_keys=True, default=str)}"
        if key not in self.kept_cells:
            self.kept_cells[key] = caller()
        return self.kept_cells[key]

    @pass_context  # as nbconvert's: Jinja hands it the template's context (the cell)
    def markdown2html(self, context, source):
        """nbconvert's, kept per cell source and what else it reads: the cell's attachments, the notebook's folder
        only where images are embedded, and this exporter's settings (mistune's parse: 2-3 ms a lesson's cell)."""
        cell = context.get("cell", {})
        path = context.get("resources", {}).get("metadata", {}).get("path", "") if self.embed_images else ""
        settings = (self.embed_images, self.anchor_link_text, self.exclude_anchor_links, repr(self.lexer_options))
        key = (source, json.dumps(cell.get("attachments", {}), sort_keys=True, default=str), path, settings)
        if key not in self.kept_markdown:
            self.kept_markdown[key] = super().markdown2html(context, source)
        return self.kept_markdown[key]

    def from_notebook_node(self, nb, resources=None, **kw):
        language = nb.metadata.get("language_info", {})
        lexer = language.get("pygments_lexer", language.get("name"))
        self.register_filter("highlight_code", self.filters.get("highlight_code",
                                                                KeptHighlight(pygments_lexer=lexer, parent=self)))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata,
                                                                       parent=self, resources=resources))
        # what else a cell's HTML depends on: this exporter's settings (a trait's value that is not JSON, by its
        # kind), the lexer, the notebook's widgets, and its folder where images are embedded
        folder = resources.get("metadata", {}).get("path", "") if self.embed_images else ""
        self.cell_context = json.dumps([self.trait_values(config=True), lexer, nb.metadata.get("widgets"), folder],
                                       sort_keys=True, default=lambda value: type(value).__qualname__)
        page, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        page, heads = HEAD.subn(lambda head: f"{head.group()}\n{PAGE_POLICY}", page, count=1)
        if not heads:  # a policy outside <head> is ignored: no page rather than one that could run a hand-in's script
            raise ValueError("the feedback template made a page without <head>: no place for its script policy")
        return NO_ALT.sub('<img alt="No description has been provided for this image"', page), resources
