"""Script in a hand-in's markdown cells and outputs, and how to tell whether a page would run any of it
(tests/test_safe_pages.py renders such pages, tests/test_browser.py opens them in Chromium).

Each payload that runs records its name in the top window (`window.__pwned`) and changes the page's title.
"""

import base64
import re
from html.parser import HTMLParser

import nbformat

MARK = "__pwned"
NAME = re.compile(rf"{MARK}\|\|\[\]\)\.concat\('([\w-]+)'\)")  # a payload's name, in the JavaScript `ran` writes
LINK_TEXT = "a link that runs script"  # a test clicks it: a javascript: address runs only when followed
LESSON_TEXT = "Lesson text kept"  # what the payloads' markdown cell also says, which a page must still show
HTML_OUTPUT_TEXT = "bold HTML output kept"
MARKDOWN_OUTPUT_TEXT = "markdown output kept"
# An image of 1 x 1 pixels, as a plot is shown: a page must still draw it
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kg"
                       "AAAABJRU5ErkJggg==")


def ran(name: str) -> str:
    """JavaScript recording, in the top window, that the payload `name` ran (and worth nothing: a javascript: address
    worth a string would replace the page with it)."""
    return f"top.{MARK}=(top.{MARK}||[]).concat('{name}');top.document.title='pwned by {name}';void 0"


MARKDOWN = "\n\n".join([
    f"<script>{ran('markdown-script')}</script>",
    f'<img src=x onerror="{ran("markdown-img-onerror")}">',
    f'<svg onload="{ran("markdown-svg-onload")}"><circle r="5"/></svg>',
    f'<a href="javascript:{ran("markdown-javascript-link")}">{LINK_TEXT}</a>',
    f'<iframe srcdoc="<script>{ran("markdown-iframe-srcdoc")}</script>"></iframe>',
    f"**{LESSON_TEXT}**: `a < b` & $x^2$"])
SVG = (f'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="40" onload="{ran("output-svg-onload")}">'
       f'<script>{ran("output-svg-script")}</script><circle cx="20" cy="20" r="15"/></svg>')
OUTPUTS = {  # IPython.display's class: (the mime type of its output, what it displays)
    "HTML": ("text/html", f'<img src=x onerror="{ran("output-html")}"><b>{HTML_OUTPUT_TEXT}</b>'),
    "Javascript": ("application/javascript", ran("output-javascript")),
    "SVG": ("image/svg+xml", SVG),
    "Markdown": ("text/markdown", f'<img src=x onerror="{ran("output-markdown")}"> **{MARKDOWN_OUTPUT_TEXT}**'),
}
WIDGET = f'<img src=x onerror="{ran("output-widget")}"></script><script>{ran("output-widget-state")}</script>'
WIDGET_MODEL = "0123456789abcdef0123456789abcdef"


def display_code() -> str:
    """Code for an answer cell: displays every output payload, an HTML widget carrying one, and a PNG image (as a
    plot is shown, which a page must still show)."""
    return "\n".join(["from IPython.display import HTML, Image, Javascript, Markdown, SVG, display",
                      "import ipywidgets",
                      *(f"display({kind}({payload!r}))" for kind, (_, payload) in OUTPUTS.items()),
                      f"display(ipywidgets.HTML({WIDGET!r}))",
                      f"display(Image(data={PNG!r}))"])


def outputs() -> list:
    """The outputs display_code makes in a kernel, made here without one."""
    made = [nbformat.v4.new_output("display_data", data={mime: payload, "text/plain": f"<{kind} object>"})
            for kind, (mime, payload) in OUTPUTS.items()]
    view = {"model_id": WIDGET_MODEL, "version_major": 2, "version_minor": 0}
    made.append(nbformat.v4.new_output("display_data", data={"application/vnd.jupyter.widget-view+json": view,
                                                             "text/plain": "HTML(value=...)"}))
    made.append(nbformat.v4.new_output("display_data", data={"image/png": base64.b64encode(PNG).decode(),
                                                             "text/plain": "<IPython.core.display.Image object>"}))
    return made


def widget_state() -> dict:
    """Notebook metadata holding the state of display_code's widget, as JupyterLab saves it."""
    state = {WIDGET_MODEL: {"model_name": "HTMLModel", "model_module": "@jupyter-widgets/controls",
                            "model_module_version": "2.0.0", "state": {"value": WIDGET}}}
    return {"application/vnd.jupyter.widget-state+json": {"state": state, "version_major": 2, "version_minor": 0}}


class _Live(HTMLParser):
    """Reads a page as a browser would, noting each payload that it would run: in a script element, an event
    handler, a frame's document or a javascript: address (a payload shown as text or an image is not)."""

    def __init__(self):
        super().__init__()
        self.found, self.in_script = [], False

    def handle_starttag(self, tag, attrs):
        self.in_script = tag == "script"
        for name, value in attrs:
            value = value or ""
            if name.startswith("on") or name == "srcdoc" or re.match(r"\s*javascript:", value, re.I):
                self.found += NAME.findall(value)

    def handle_endtag(self, tag):
        self.in_script = False

    def handle_data(self, data):
        if self.in_script:
            self.found += NAME.findall(data)


def live(page: str) -> list[str]:
    """The payloads a browser would run in this HTML page, by name; [] where none."""
    parser = _Live()
    parser.feed(page)
    parser.close()
    return parser.found


def policy(page: str) -> str | None:
    """The page's Content-Security-Policy where a <meta> in its <head> sets it before any script, else None."""
    head = re.search(r"<head\b[^>]*>(.*?)</head>", page, re.S | re.I)
    match = head and re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)"', head.group(1), re.I)
    return match.group(1) if match and "<script" not in head.group(1)[:match.start()].lower() else None
