"""Time the report's similarity step on a synthetic class and print what it flagged, as `make bench-similarity` does.

1,000 hand-ins of a four-exercise notebook (each exercise in a few styles, each line written in one of several ways,
statements in either order, names from pools, lines of the student's own) and a handful of copied pairs, each copy with
its names changed, two adjacent statements swapped and a comment added. The hand-ins are notebook files, read as the
report reads a graded class's. Prints the seconds taken and the pairs flagged, the planted ones marked; never asserts
a time. --exhaustive also compares every pair that shares a fingerprint, to check the prefilter loses no pair.
"""

import argparse
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from traitlets.config import Config

from autograder.reports import similarity
from autograder.reports.similarity import find

BUDGET_S = 60  # the target for 1,000 hand-ins x 4 exercises on a 2-core machine; reported, never asserted
STUB = "    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION\n"
SIGNATURES = {
    "ex1_standardize": 'def standardize(x, eps=1e-5):\n    """x with zero mean and unit variance along dim 0."""\n',
    "ex2_train_epoch": 'def train_epoch(model, loader, loss_fn, optimizer, clip=None):\n'
                       '    """One epoch of training; the mean loss per sample."""\n',
    "ex3_windows": 'def windows(x, size, step=1):\n    """Rows of `size` elements every `step` elements of 1-D x."""\n',
    "ex4_mlp": 'def make_mlp(sizes, dropout=0.0):\n    """An nn.Module: Linear layers of these sizes, ReLU between."""\n',
}
# Each exercise: styles; each style: lines, each line a list of ways to write it ("" leaves it out); within a way,
# «a¦b¦c» is written in one of those ways, "|" splits it into lines, and {a} {b} ... are names drawn per student.
# Two adjacent lines marked "~" may come in either order.
STYLES = {
    "ex1_standardize": [
        [["{a} = «x.mean¦torch.mean¦x.float().mean»(«dim=0¦0», keepdim=«True¦1»)",
          "{a} = x.sum(«dim=0¦0», keepdim=True) / «len(x)¦x.shape[0]¦x.size(0)»"],
         ["~{b} = x.std(«dim=0¦0», «unbiased=False, ¦correction=0, ¦»keepdim=True)",
          "~{b} = ((x - x.mean(«0¦dim=0», keepdim=True)) ** 2).«mean¦sum»(«0¦dim=0», keepdim=True).«sqrt()¦pow(0.5)»",
          "~{b} = torch.sqrt(x.var(«0¦dim=0», keepdim=True«, unbiased=False¦»))"],
         ["~{z} = x.shape[«0¦-1»]", "", "~{z} = «len(x)¦x.numel()»"],
         ["", "assert {b}.shape«[-1]¦[1]» == x.shape«[-1]¦[1]»«, 'shapes'¦»", "{b} = {b}.clamp«_min(eps)¦(min=eps)»",
          "{b}[{b} «== 0¦< eps»] = «1.0¦eps»"],
         ["return (x - {a}) / ({b} + eps)", "return (x - {a}) / «torch.sqrt({b} ** 2 + eps)¦({b} + eps)¦{b}.add(eps)»",
          "{c} = x - {a}|return {c} / ({b} «+ eps¦.add(eps)»)", "return x.sub({a}).div({b}«.add(eps)¦ + eps»)"]],
        [["{c} = «x.clone()¦x.detach().clone()¦torch.empty_like(x«, dtype=torch.float32¦»)¦torch.zeros_like(x)»"],
         ["for {i} in range(«x.shape[1]¦x.size(1)¦x.size()[1]¦len(x[0])»):"],
         ["    {d} = x[:, {i}]«.float()¦.double()¦»"],
         ["    {a} = «{d}.sum() / len({d})¦{d}.mean()¦float({d}.mean())¦torch.mean({d})»"],
         ["    {b} = «(({d} - {a}) ** 2).mean().sqrt()¦{d}.var(unbiased=False) ** 0.5¦{d}.std()¦torch.std({d})»"],
         ["    if {b} «< eps¦== 0»:|        {b} = «eps¦1.0»", ""],
         ["    {c}[:, {i}] = «({d} - {a}) / ({b} + eps)¦({d} - {a}) / max({b}, eps)¦({d} - {a}) / {b}»"],
         ["return {c}", "return {c}«.to(x.dtype)¦.float()»"]],
    ],
    "ex2_train_epoch": [
        [["model.train(«¦True¦mode=True»)", ""],
         ["~{t} = «0.0¦0¦torch.zeros(())¦torch.tensor(0.0)»"],
         ["~{n} = 0«  # samples¦»"],
         ["for {a}, {b} in «loader¦iter(loader)¦tqdm(loader)¦loader.__iter__()»:",
          "for {i}, ({a}, {b}) in enumerate(loader«, start=1¦»):"],
         ["    «optimizer.zero_grad()¦optimizer.zero_grad(set_to_none=True)¦model.zero_grad()»"],
         ["    {c} = model({a}«.float()¦»)|    {l} = loss_fn({c}, {b}«.long()¦»)",
          "    {l} = loss_fn(model({a}), {b})", "    {l} = loss_fn(input=model({a}), target={b})"],
         ["    {l}.backward()"],
         ["    if clip «is not None¦¦> 0¦is not None and clip > 0»:|        «torch.nn.utils¦nn.utils».clip_grad_«norm_¦value_»"
          "(model.parameters(), «clip¦max_norm=clip»)", ""],
         ["    optimizer.step()"],
         ["~    {t} += «{l}.item()¦float({l})¦{l}.detach()» * «len({b})¦{b}.shape[0]¦{b}.size(0)»",
          "~    {t} = {t} + {l}.item() * len({b})"],
         ["~    {n} += «len({b})¦{b}.shape[0]¦{b}.numel()¦{b}.size(0)»"],
         ["", "    print({l}.item())", "    assert torch.isfinite({l})«, 'loss is not finite'¦»",
          "    if torch.isnan({l}):|        raise RuntimeError('nan loss')"],
         ["return {t} / {n}", "return float({t} / {n})", "return «float¦»({t} / max({n}, 1))"]],
        [["{h} = «[]¦list()»"],
         ["{w} = «[]¦list()»"],
         ["model.train()", ""],
         ["for «{a}, {b}¦({a}, {b})» in loader:"],
         ["    {o} = model({a}«¦.float()»)"],
         ["    {l} = loss_fn(«{o}, {b}¦input={o}, target={b}¦{o}, {b}.long()»)"],
         ["    optimizer.zero_grad()|    {l}.backward()", "    {l}.backward()"],
         ["    if clip«¦ is not None¦ is not None and clip > 0»:|        torch.nn.utils.clip_grad_norm_(model.parameters(), "
          "«clip¦max_norm=clip»)"],
         ["    optimizer.step()", "    optimizer.step()|    optimizer.zero_grad()"],
         ["    {h}.append(«{l}.item()¦float({l})» * «len({b})¦{b}.shape[0]»)"],
         ["    {w}.append(«len({b})¦{b}.shape[0]¦int({b}.numel())»)"],
         ["return sum({h}) / «sum({w})¦max(1, sum({w}))»", "return «float(¦»np.sum({h}) / np.sum({w})«)¦»"]],
    ],
    "ex3_windows": [
        [["{n} = «(x.numel() - size) // step + 1¦1 + (len(x) - size) // step¦(x.shape[0] - size) // step + 1»"],
         ["", "if {n} «<= 0¦< 1»:|    return x.new_empty«((0, size))¦(0, size)»",
          "assert {n} > 0«, 'x shorter than size'¦»"],
         ["{s} = x.stride«(0)¦()[0]»", ""],
         ["return «x.as_strided¦torch.as_strided»(«¦size=»({n}, size), «¦stride=»(step * x.stride«(0)¦()[0]», "
          "x.stride«(0)¦()[0]»)«, x.storage_offset()¦»)"]],
        [["{r} = «[]¦list()»"],
         ["for {i} in range(0, «len(x)¦x.shape[0]¦x.numel()¦x.size(0)» - size + 1, step):"],
         ["    {r}.append(x[{i}:{i} + size]«¦.clone()»)", "    {w} = x[{i}:{i} + size]|    {r}.append({w})",
          "    {r} += [x[{i}:{i} + size]]"],
         ["if «not {r}¦len({r}) == 0»:|    return x.new_empty((0, size))", ""],
         ["return torch.«stack({r})¦stack({r}, dim=0)¦vstack({r})»"]],
        [["{i} = 0"],
         ["{r} = «[]¦list()»"],
         ["while {i} + size <= «len(x)¦x.shape[0]¦x.numel()»:"],
         ["    {r}.append(x[{i}:{i} + size]«¦.clone()»)"],
         ["    {i} «+= step¦= {i} + step»"],
         ["return torch.stack({r}) if {r} else x.new_empty((0, size))", "return torch.stack({r})"]],
        [["return x.unfold(«0¦dimension=0», «size¦size=size», «step¦step=step»)",
          "{u} = x.unfold(0, size, step)|assert {u}.shape«[1]¦[-1]» == size|return {u}"]],
    ],
    "ex4_mlp": [
        [["{l} = «[]¦list()¦[]  # the layers»"],
         ["for {i} in range(len(sizes) - 1):", "for {i}, ({a}, {b}) in enumerate(zip(sizes«[:-1]¦», sizes[1:])):"],
         ["    {l}.append(nn.Linear(sizes[{i}], sizes[{i} + 1]«¦, bias=True»))", "    {l}.append(nn.Linear({a}, {b}))",
          "    {l} += [nn.Linear(sizes[{i}], sizes[{i} + 1])]"],
         ["    if {i} «< len(sizes) - 2¦!= len(sizes) - 2¦+ 2 < len(sizes)»:"],
         ["        {l}.«append(nn.ReLU(«¦inplace=True»))¦extend([nn.ReLU()])»", "        {l} += [nn.ReLU()]"],
         ["        if dropout «> 0¦> 0.0¦!= 0»:|            {l}.append(nn.Dropout(«dropout¦p=dropout»))", ""],
         ["return nn.Sequential(*{l})", "{m} = «nn.Sequential(*{l})¦torch.nn.Sequential(*{l})»|return {m}"]],
        [["class {C}(«nn.Module¦torch.nn.Module»):"],
         ["    def __init__(self«¦, sizes=sizes»):"],
         ["        «super().__init__()¦super({C}, self).__init__()¦nn.Module.__init__(self)»"],
         ["        self.{l} = nn.ModuleList([nn.Linear({a}, {b}) for {a}, {b} in zip(sizes«[:-1]¦», sizes[1:])])",
          "        self.{l} = nn.ModuleList()|        for {i} in range(len(sizes) - 1):|"
          "            self.{l}.append(nn.Linear(sizes[{i}], sizes[{i} + 1]))"],
         ["        self.{d} = «nn.Dropout(dropout)¦nn.Dropout(p=dropout)¦dropout»"],
         ["    def forward(self, x):"],
         ["        for {i}, {f} in enumerate(self.{l}):",
          "        for {i} in range(len(self.{l})):|            {f} = self.{l}[{i}]"],
         ["            x = {f}(x)"],
         ["            if {i} «< len(self.{l}) - 1¦!= len(self.{l}) - 1»:"],
         ["                x = «torch.relu(x)¦F.relu(x)¦x.clamp_min(0)¦nn.functional.relu(x)»"],
         ["                x = self.{d}(x)", "                x = F.dropout(x, «self.{d}¦p=self.{d}», self.training)", ""],
         ["        return x"],
         ["return {C}()", "{m} = {C}()|return {m}"]],
    ],
}
CHOICE = re.compile(r"«([^«»]*)»")
NAMES = ["out", "res", "acc", "tmp", "val", "y", "z", "buf", "cur", "total", "count", "parts", "items", "h", "k", "j",
         "mu", "sigma", "avg", "dev", "loss", "pred", "xb", "yb", "inputs", "targets", "batch", "step_i", "chunk", "w",
         "layers", "mods", "net", "fc", "drop", "idx", "start", "stride_", "view", "seq", "lst", "data", "lab", "n_i"]
CLASSES = ["MLP", "Net", "Model", "MyMLP", "FeedForward", "Perceptron"]
COMMENTS = ["# compute it", "# TODO: check shapes", "# as in the lesson", "# vectorised", "# see the docs"]
# What students add of their own, anywhere: checks, conversions, debugging, constants, notes to themselves.
EXTRAS = ["assert x.dim() >= {k}", "x = torch.as_tensor(x«, dtype=torch.float32¦»)", "print(«type(x)¦x.shape¦'here', {k}»)",
          "{v} = x.shape«[0]¦[-1]¦»", "{v} = len(x) «+¦-¦*» {k}", "assert not torch.isnan(x).any()«, 'nan in the input'¦»",
          "x = x.contiguous()", "{v} = x.dtype", "{v} = {k}", "torch.manual_seed({k})", "{v} = [{k}, {k2}«, {k}¦»]",
          "if x is None:|    raise ValueError('no input')", "{v} = x.numel() * {k}", "import math", "{v} = math.sqrt({k})",
          "{v} = {{'n': {k}, 'm': {k2}}}", "logging.debug('step %d', {k})", "{v} = torch.zeros({k}, {k2})",
          "{v} = sum(range({k}))", "{v} = x.float().abs().max()«.item()¦»", "{v} = ({k}, {k2})",
          "{v} = {k} if x is not None else {k2}", "{v} = [i * {k} for i in range({k2})]", "{v} = x[:{k}].sum()",
          "{v} = «max¦min»({k}, {k2})", "{v} = {k} ** 2 - {k2}", "for _ in range({k}):|    pass",
          "if {k} > {k2}:|    {v} = {k}", "{v} = str({k}) + '{k2}'", "del {v}", "{v} = x.new_tensor([{k}.0])"]


def answer(rng: random.Random, exercise: str) -> str:
    """One student's answer: a style, a way to write each of its lines, names of their own, some lines of their own
    (checks, conversions, debugging), maybe the result named before it is returned, maybe a comment."""
    lines = []
    for ways in rng.choice(STYLES[exercise]):
        way = rng.choice(ways)
        while CHOICE.search(way):  # the innermost choices first
            way = CHOICE.sub(lambda m: rng.choice(m.group(1).split("¦")), way)
        if way:
            lines.append(way)
    for k in range(len(lines) - 1):  # two adjacent statements marked "~" may come in either order
        if lines[k].startswith("~") and lines[k + 1].startswith("~") and rng.random() < 0.5:
            lines[k], lines[k + 1] = lines[k + 1], lines[k]
    fill = dict(zip("abcdfhilmnorstuwz", rng.sample(NAMES, 17)), C=rng.choice(CLASSES))
    body = [part.rstrip() for line in lines for part in line.lstrip("~").format(**fill).split("|")]
    if body[-1].startswith("return ") and rng.random() < 0.4:
        body[-1:] = [f"{fill['r']} = {body[-1][len('return '):]}", f"return {fill['r']}"]
    for _ in range(rng.choice([1, 2, 2, 3, 3, 4, 5])):
        extra = CHOICE.sub(lambda m: rng.choice(m.group(1).split("¦")), rng.choice(EXTRAS))
        extra = extra.format(v=rng.choice(NAMES), k=rng.randrange(2, 100), k2=rng.randrange(2, 100))
        at = rng.randrange(len(body))  # before this line, indented as it is
        body[at:at] = [" " * (len(body[at]) - len(body[at].lstrip())) + part for part in extra.split("|")]
    if rng.random() < 0.3:
        at = rng.randrange(len(body))
        body.insert(at, " " * (len(body[at]) - len(body[at].lstrip())) + rng.choice(COMMENTS))
    return SIGNATURES[exercise] + "\n".join(("    " + line).rstrip() for line in body)


IDENTIFIER = re.compile(r"\b(" + "|".join(sorted(NAMES + CLASSES, key=len, reverse=True)) + r")\b")


def disguised(rng: random.Random, code: str) -> str:
    """A copy as a student hides it: every name from the pools renamed, two adjacent simple statements swapped."""
    new = {name: f"{name}_{rng.randrange(10, 99)}" for name in NAMES + CLASSES}
    lines = IDENTIFIER.sub(lambda m: new[m.group(1)], code).split("\n")
    simple = [k for k in range(2, len(lines) - 1) if lines[k].strip() and lines[k + 1].strip()
              and not lines[k].rstrip().endswith(":") and not lines[k + 1].rstrip().endswith(":")
              and len(lines[k]) - len(lines[k].lstrip()) == len(lines[k + 1]) - len(lines[k + 1].lstrip())
              and not lines[k + 1].strip().startswith("return")]
    if simple:
        k = rng.choice(simple)
        lines[k], lines[k + 1] = lines[k + 1], lines[k]
    return "\n".join(lines) + "\n    # checked it twice"


def source_notebook(path: Path) -> Path:
    """A four-exercise source notebook: each answer cell its signature and a solution region."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for gid, signature in SIGNATURES.items():
        cell = nbformat.v4.new_code_cell(signature + STUB)
        cell.metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False, "grade_id": gid,
                                     "schema_version": 3}
        nb.cells.append(cell)
    nbformat.write(nb, path)
    return path


def flagged(findings) -> set[tuple[str, str, str]]:
    """(exercise, student, student) of every pair flagged."""
    return {(e.grade_id, *pair.students) for e in findings.exercises for pair in e.pairs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=1000)
    parser.add_argument("--copies", type=int, default=8, help="copied pairs planted, over the four exercises")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a Similarity setting other than the default, e.g. --set threshold=0.7")
    parser.add_argument("--exhaustive", action="store_true",
                        help="also compare every pair sharing a fingerprint (no prefilter) and say whether the same "
                             "pairs are flagged")
    args = parser.parse_args()
    config = Config()
    for setting in args.set:
        name, value = setting.split("=", 1)
        config.Similarity[name] = json.loads(value)
    rng = random.Random(args.seed)
    students = [f"s{k:04d}" for k in range(args.students)]
    answers = {s: {gid: answer(rng, gid) for gid in SIGNATURES} for s in students}
    planted = set()
    for k in range(args.copies):
        gid = list(SIGNATURES)[k % len(SIGNATURES)]
        original, copier = rng.sample(students, 2)
        answers[copier][gid] = disguised(rng, answers[original][gid])
        planted.add((gid, *sorted((original, copier))))
    with tempfile.TemporaryDirectory(prefix="bench-similarity-") as folder:
        source = source_notebook(Path(folder) / "source.ipynb")
        submitted = Path(folder) / "submitted"
        submitted.mkdir()
        for s in students:
            nb = nbformat.read(source, as_version=4)
            for cell in nb.cells:
                cell.source = answers[s][cell.metadata["nbgrader"]["grade_id"]]
            (submitted / f"{s}.ipynb").write_text(json.dumps(nb))
        rows = [{"student_id": s, "status": "graded"} for s in students]
        start = time.perf_counter()
        findings = find(rows, submitted, source, config)
        seconds = time.perf_counter() - start
        if args.exhaustive:
            similarity.PREFILTER, start = 0.0, time.perf_counter()
            everything = find(rows, submitted, source, config)
            exhaustive_seconds = time.perf_counter() - start
    settings = findings.settings
    print(f"{args.students} hand-ins x {len(SIGNATURES)} exercises: {seconds:.1f} s (target {BUDGET_S} s); "
          f"threshold {settings.threshold:g}, noise {settings.noise}, shortest {settings.shortest}")
    for exercise in findings.exercises:
        n = len(exercise.pairs)
        print(f"{exercise.grade_id}: {exercise.answers} answers ({exercise.short} too short), "
              f"{n} pair{'' if n == 1 else 's'} flagged")
        for pair in exercise.pairs:
            mark = "planted" if (exercise.grade_id, *pair.students) in planted else "not planted"
            print(f"  {pair.students[0]} {pair.students[1]}  {pair.score:.2f} "
                  f"({pair.similarities[0]:.2f} / {pair.similarities[1]:.2f})  {mark}")
    missed = sorted(planted - flagged(findings))
    print(f"planted copies flagged: {len(planted) - len(missed)} of {len(planted)}"
          + "".join(f"\n  missed: {gid} {a} {b}" for gid, a, b in missed))
    if args.exhaustive:
        same = "the same pairs" if flagged(everything) == flagged(findings) else \
            f"{len(flagged(everything) - flagged(findings))} more pairs"
        print(f"every pair sharing a fingerprint compared: {exhaustive_seconds:.1f} s, {same} flagged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
