"""Notebook 07: plausible wrong answers (each must lose its exercise's points) and right answers other than the
solution (other readings of the statement, answers that write to stderr)
(some also take a choice the statement leaves open, so that the suite proves the tests accept it)."""

from course import changed


_WRITE = '''
    fd, tmp = tempfile.mkstemp(dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.remove(tmp)
        raise
'''[1:]
_DIRSYNC = '''
    folder_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(folder_fd)
    finally:
        os.close(folder_fd)
'''[1:]

_SAVE = '''
def save_checkpoint(path, *, model, optimizer, epoch, scheduler=None, scaler=None, extra=None):
    state = {
        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "scaler": None if scaler is None else scaler.state_dict(), "epoch": epoch, "extra": extra,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
    }
    folder = os.path.dirname(os.path.abspath(path))
''' + _WRITE + _DIRSYNC

_FIT = '''
def fit(model, optimizer, loader, loss_fn, epochs, ckpt_path, resume=True):
    start = 0
    if resume and os.path.exists(ckpt_path):
        start = load_checkpoint(ckpt_path, model=model, optimizer=optimizer)["epoch"]
    dev = next(model.parameters()).device
    losses = []
    for epoch in range(start, epochs):
        model.train()
        total, count = 0.0, 0
        for x, y in loader:
            x, y = x.to(dev), y.to(dev)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(x)
            count += len(x)
        losses.append(total / count)
        save_checkpoint(ckpt_path, model=model, optimizer=optimizer, epoch=epoch + 1)
    return losses
'''

_DIST = '''
def save_distributed(path, model, optimizer):
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)


def load_single(path, model, optimizer):
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
'''


_LOAD = '''
def load_checkpoint(path, *, model, optimizer=None, scheduler=None, scaler=None, map_location="cpu"):
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:
        raise RuntimeError(f"cannot load {path}: {err}") from err
    model.load_state_dict(state["model"])
    for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler"), (scaler, "scaler")):
        if obj is not None and state[key] is not None:
            obj.load_state_dict(state[key])
    torch.set_rng_state(state["rng"]["torch"].cpu())
    random.setstate(state["rng"]["python"])
    return state
'''

WRONG = {
    "ex1_save_checkpoint": {
        'not atomic: torch.save straight onto path': changed(
            _SAVE,
            ('    state = {\n', '    torch.save({\n'),
            ('    }\n    folder = os.path.dirname(os.path.abspath(path))\n' + _WRITE + _DIRSYNC, '    }, path)\n')),
        "the temporary file in the system's temp folder, not beside the target": changed(
            _SAVE,
            ('    fd, tmp = tempfile.mkstemp(dir=folder)\n', '    fd, tmp = tempfile.mkstemp(suffix=".pt")\n')),
        'the model object pickled instead of its state_dict': changed(
            _SAVE,
            ('        "model": model.state_dict(), "optimizer": optimizer.state_dict(),\n', '        "model": model, "optimizer": optimizer.state_dict(),\n')),
        'a failed write leaves its temporary file behind': changed(
            _SAVE,
            (_WRITE, '    tmp = os.fspath(path) + ".tmp"\n    with open(tmp, "wb") as f:\n        torch.save(state, f)\n'
                     '        f.flush()\n        os.fsync(f.fileno())\n    os.replace(tmp, path)\n')),
        'a failed write is swallowed: the caller never hears of it': changed(
            _SAVE,
            ('    except BaseException:\n', '    except Exception as err:\n'),
            ('        raise\n', '        print("checkpoint not written:", err)\n        return\n')),
        'no CUDA entry in the RNG states': changed(
            _SAVE,
            ('        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),\n                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},\n', '        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},\n')),
        'atomic but not durable: no os.fsync at all (a power cut can lose what the rename points to)': changed(
            _SAVE,
            ('            f.flush()\n            os.fsync(f.fileno())\n', ''),
            (_DIRSYNC, '')),
        "the folder opened for its fsync and never closed: one descriptor leaked per checkpoint": changed(
            _SAVE, (_DIRSYNC, '    os.fsync(os.open(folder, os.O_RDONLY))\n')),
        "the file is synced but not its folder: the rename itself may not reach the disk": changed(
            _SAVE, (_DIRSYNC, '')),
        "os.rename, not os.replace: on Windows it refuses to overwrite the checkpoint already at path": changed(
            _SAVE, ('        os.replace(tmp, path)\n', '        os.rename(tmp, path)\n')),
        'fsync before writing: the empty temporary file is synced, then written': changed(
            _SAVE,
            ('        with os.fdopen(fd, "wb") as f:\n            torch.save(state, f)\n            f.flush()\n            os.fsync(f.fileno())\n',
             '        os.fsync(fd)\n        with os.fdopen(fd, "wb") as f:\n            torch.save(state, f)\n')),
    },
    "ex2_load_checkpoint": {
        "weights_only=False: runs whatever the file contains": changed(
            _LOAD, ("weights_only=True", "weights_only=False")),
        "weights_only left to torch.load's default, which an environment variable can flip": changed(
            _LOAD, (", weights_only=True", "")),
        "map_location ignored: every file loaded onto the CPU": changed(
            _LOAD, ("map_location=map_location, weights_only", 'map_location="cpu", weights_only')),
        "the RNG states are not restored": changed(
            _LOAD, ('    torch.set_rng_state(state["rng"]["torch"].cpu())\n', ""),
            ('    random.setstate(state["rng"]["python"])\n', "")),
        "the optimizer's state is not restored": changed(_LOAD, ('(optimizer, "optimizer"), ', "")),
        "torch.load's own error for a corrupt file, which does not name the path": changed(_LOAD, (
            "    try:\n        state = torch.load(path, map_location=map_location, weights_only=True)\n"
            "    except Exception as err:\n        raise RuntimeError(f\"cannot load {path}: {err}\") from err\n",
            "    state = torch.load(path, map_location=map_location, weights_only=True)\n")),
        "the scaler's state is not restored": changed(_LOAD, (', (scaler, "scaler")', "")),
    },
    "ex3_fit": {
        "the resume forgets the optimizer's state": changed(
            _FIT,
            ('        start = load_checkpoint(ckpt_path, model=model, optimizer=optimizer)["epoch"]\n', '        start = load_checkpoint(ckpt_path, model=model)["epoch"]\n')),
        'the mean of the batch losses, not the mean per sample': changed(
            _FIT,
            ('        total, count = 0.0, 0\n', '        batch_losses = []\n'),
            ('            total += loss.item() * len(x)\n            count += len(x)\n        losses.append(total / count)\n', '            batch_losses.append(loss.item())\n        losses.append(sum(batch_losses) / len(batch_losses))\n')),
        'epochs counted from the resume: trains `epochs` more instead of up to `epochs`': changed(
            _FIT,
            ('    for epoch in range(start, epochs):\n', '    for epoch in range(start, start + epochs):\n')),
        'off by one: the resume skips the epoch after the checkpoint': changed(
            _FIT,
            ('        start = load_checkpoint(ckpt_path, model=model, optimizer=optimizer)["epoch"]\n', '        start = load_checkpoint(ckpt_path, model=model, optimizer=optimizer)["epoch"] + 1\n')),
        'the checkpoint records the 0-based index of the finished epoch (resuming at it + 1)': changed(
            _FIT,
            ('        start = load_checkpoint(ckpt_path, model=model, optimizer=optimizer)["epoch"]\n', '        start = load_checkpoint(ckpt_path, model=model, optimizer=optimizer)["epoch"] + 1\n'),
            ('        save_checkpoint(ckpt_path, model=model, optimizer=optimizer, epoch=epoch + 1)\n', '        save_checkpoint(ckpt_path, model=model, optimizer=optimizer, epoch=epoch)\n')),
        'never calls model.train(): a model handed over in eval() mode trains without dropout': changed(
            _FIT,
            ('        model.train()\n', '        pass\n')),
        "batches are not moved to the model's device": changed(
            _FIT,
            ('            x, y = x.to(dev), y.to(dev)\n', '            pass\n')),
        'resume=False ignored: an existing checkpoint is always restored': changed(
            _FIT,
            ('    if resume and os.path.exists(ckpt_path):\n', '    if os.path.exists(ckpt_path):\n')),
        "the loss scaled by the loader's batch size before backward: Adam almost hides it, not in the parameters' last bits":
            changed(_FIT, ('            loss.backward()\n', '            (loss * loader.batch_size).backward()\n')),
        'one checkpoint, after the last epoch only: a crash in between loses the whole run': changed(
            _FIT,
            ('        save_checkpoint(ckpt_path, model=model, optimizer=optimizer, epoch=epoch + 1)\n', ''),
            ('    return losses\n', '    save_checkpoint(ckpt_path, model=model, optimizer=optimizer, epoch=epochs)\n    return losses\n')),
    },
    "ex4_checkpointed_mlp": {
        "groups of depth // segments: the remainder's blocks are skipped": '''
class CheckpointedMLP(nn.Module):
    def __init__(self, width, depth, segments):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.size, self.segments = depth // segments, segments

    def forward(self, x):
        for k in range(self.segments):
            x = checkpoint(self._run, x, k * self.size, (k + 1) * self.size, use_reentrant=False)
        return x

    def _run(self, x, start, stop):
        for block in self.blocks[start:stop]:
            x = block(x)
        return x
''',
        "uneven split: the last group takes all the remainder": '''
class CheckpointedMLP(nn.Module):
    def __init__(self, width, depth, segments):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        size = depth // segments
        self.bounds = [k * size for k in range(segments)] + [depth]

    def forward(self, x):
        for start, stop in zip(self.bounds, self.bounds[1:]):
            x = checkpoint(self._run, x, start, stop, use_reentrant=False)
        return x

    def _run(self, x, start, stop):
        for block in self.blocks[start:stop]:
            x = block(x)
        return x
''',
        "groups of ceil(depth / segments): too few segments": '''
class CheckpointedMLP(nn.Module):
    def __init__(self, width, depth, segments):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.size = -(-depth // segments)

    def forward(self, x):
        for start in range(0, len(self.blocks), self.size):
            x = checkpoint(self._run, x, start, start + self.size, use_reentrant=False)
        return x

    def _run(self, x, start, stop):
        for block in self.blocks[start:stop]:
            x = block(x)
        return x
''',
        "segments ignored: every block checkpointed on its own": '''
class CheckpointedMLP(nn.Module):
    def __init__(self, width, depth, segments):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x
''',
        # issue 40: the hidden test called the visible test's spy, which the answer could bind again (full marks then)
        "segments ignored, the answer binding the tests' spy to one that agrees when it runs (_groups_in_backward)": '''
class CheckpointedMLP(nn.Module):
    def __init__(self, width, depth, segments):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.segments = segments

    def forward(self, x):
        CheckpointedMLP.forward.__globals__["_groups_in_backward"] = _agrees  # the test's own namespace
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x


def _agrees(model, x):
    """What a checkpoint in `segments` even groups would show."""
    depth, k = len(model.blocks), model.segments
    bounds = [i * depth // k for i in range(k + 1)]
    return list(range(depth)), [list(range(a, b)) for a, b in zip(bounds, bounds[1:])]
''',
        "preserve_rng_state=False: dropout recomputes other masks": '''
class CheckpointedMLP(nn.Module):
    def __init__(self, width, depth, segments):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.bounds = [i * depth // segments for i in range(segments + 1)]

    def forward(self, x):
        for start, stop in zip(self.bounds, self.bounds[1:]):
            x = checkpoint(self._run, x, start, stop, use_reentrant=False, preserve_rng_state=False)
        return x

    def _run(self, x, start, stop):
        for block in self.blocks[start:stop]:
            x = block(x)
        return x
''',
        "use_reentrant=True: no weight gradients when the input needs none": '''
class CheckpointedMLP(nn.Module):
    def __init__(self, width, depth, segments):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.bounds = [i * depth // segments for i in range(segments + 1)]

    def forward(self, x):
        for start, stop in zip(self.bounds, self.bounds[1:]):
            x = checkpoint(nn.Sequential(*self.blocks[start:stop]), x, use_reentrant=True)
        return x
''',
    },
    "ex5_saved_activation_bytes": {
        "counts the parameters' bytes instead": '''
def saved_activation_bytes(model, x):
    model(x)
    return sum(p.numel() * p.element_size() for p in model.parameters())
''',
        "counts elements, not bytes": '''
def saved_activation_bytes(model, x):
    total = 0
    def pack(t):
        nonlocal total
        total += t.numel()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return total
''',
        "counts every module's output with forward hooks": '''
def saved_activation_bytes(model, x):
    total = 0
    def hook(module, args, out):
        nonlocal total
        if not list(module.children()):
            total += out.numel() * out.element_size()
    handles = [m.register_forward_hook(hook) for m in model.modules()]
    model(x)
    for h in handles:
        h.remove()
    return total
''',
        "runs the model twice": '''
def saved_activation_bytes(model, x):
    model(x)  # a warm-up run
    total = 0
    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return total
''',
        "leaves its saved_tensors_hooks installed": '''
def saved_activation_bytes(model, x):
    total = 0
    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t
    torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t).__enter__()
    model(x)
    return total
''',
        "leaves out the views of the weights": '''
def saved_activation_bytes(model, x):
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    total = 0
    def pack(t):
        nonlocal total
        if t.untyped_storage().data_ptr() not in weights:
            total += t.numel() * t.element_size()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return total
''',
    },
    "ex6_distributed_checkpoint": {
        "only rank 0 writes, with torch.save of its own state dicts: the other ranks' slices are lost": '''
def save_distributed(path, model, optimizer):
    model_state, optimizer_state = get_state_dict(model, optimizer)
    if dist.get_rank() == 0:
        os.makedirs(path, exist_ok=True)
        torch.save({"model": model_state, "optimizer": optimizer_state}, os.path.join(path, "checkpoint.pt"))


def load_single(path, model, optimizer):
    state = torch.load(os.path.join(path, "checkpoint.pt"), weights_only=False)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
''',
        "the model alone: the optimizer's state is neither saved nor loaded": '''
def save_distributed(path, model, optimizer):
    dcp.save({"model": model.state_dict()}, checkpoint_id=path)


def load_single(path, model, optimizer):
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=path)
    model.load_state_dict(state["model"])
''',
        "the optimizer's own state_dict(): a fresh optimizer has no state for dcp.load to fill": changed(
            _DIST,
            ('    model_state, optimizer_state = get_state_dict(model, optimizer)\n    state = {"model": model_state, "optimizer": optimizer_state}\n',
             '    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}\n'),
            ('    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])\n',
             '    model.load_state_dict(state["model"])\n')),
        'the dict saved under other names ("net", "opt"): it round-trips, but is not the checkpoint the statement names':
            changed(_DIST,
                    ('    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)\n',
                     '    dcp.save({"net": model_state, "opt": optimizer_state}, checkpoint_id=path)\n'),
                    ('    state = {"model": model_state, "optimizer": optimizer_state}\n', '    state = {"net": model_state, "opt": optimizer_state}\n'),
                    ('optim_state_dict=state["optimizer"]', 'optim_state_dict=state["opt"]'),
                    ('model_state_dict=state["model"]', 'model_state_dict=state["net"]')),
        "load_single loads the two state dicts one by one: the checkpoint holds them under model. and optimizer.": changed(
            _DIST,
            ('    state = {"model": model_state, "optimizer": optimizer_state}\n    dcp.load(state, checkpoint_id=path)\n'
             '    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])\n',
             '    dcp.load(model_state, checkpoint_id=path)\n    dcp.load(optimizer_state, checkpoint_id=path)\n'
             '    set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)\n')),
    },
}

ALSO_RIGHT = {
    "ex1_save_checkpoint": {
        "prints what it saves to stderr": "\nimport sys\n" + changed(
            _SAVE, ('    fd, tmp = tempfile.mkstemp(dir=folder)\n',
                    '    fd, tmp = tempfile.mkstemp(dir=folder)\n    print(f"saving epoch {epoch} to {path}", file=sys.stderr)\n')),
        "warns when it overwrites a checkpoint": '''
def save_checkpoint(path, *, model, optimizer, epoch, scheduler=None, scaler=None, extra=None):
    if os.path.exists(path):
        warnings.warn(f"overwriting {path}")
    state = {
        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "scaler": None if scaler is None else scaler.state_dict(), "epoch": epoch, "extra": extra,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
    }
    directory = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile(dir=directory, delete=False) as f:
        tmp = f.name
        try:
            torch.save(state, f)
            f.flush()
            os.fsync(f)  # os.fsync takes a file object too
        except BaseException:
            f.close()
            os.remove(tmp)
            raise
    Path(tmp).replace(path)  # pathlib's replace is os.replace
    fd = os.open(directory, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
''',
    },
    "ex6_distributed_checkpoint": {
        "leaves DCP's warning that it assumes a single process on stderr": _DIST,
    },
    "ex3_fit": {
        "prints its progress to stderr": "\nimport sys\n" + changed(
            _FIT,
            ('        start = load_checkpoint(ckpt_path, model=model, optimizer=optimizer)["epoch"]\n',
             '        start = load_checkpoint(ckpt_path, model=model, optimizer=optimizer)["epoch"]\n'
             '        print(f"resuming at epoch {start}", file=sys.stderr)\n'),
            ('        losses.append(total / count)\n',
             '        losses.append(total / count)\n        print(f"epoch {epoch + 1}: {losses[-1]:.4f}", file=sys.stderr)\n')),
        "moves only batches not yet on the model's device, sets train() once, logs to stderr": '''
import sys

def fit(model, optimizer, loader, loss_fn, epochs, ckpt_path, resume=True):
    done = 0
    if resume and os.path.exists(ckpt_path):
        done = int(load_checkpoint(ckpt_path, model=model, optimizer=optimizer).get("epoch", 0))
    device = next(model.parameters()).device
    model.train()
    losses = []
    while done < epochs:
        total = torch.zeros((), dtype=torch.float64)
        count = 0
        for x, y in loader:
            if x.device != device:
                x = x.to(device, non_blocking=True)
            if y.device != device:
                y = y.to(device, non_blocking=True)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.detach().double().cpu() * x.shape[0]
            count += x.shape[0]
        done += 1
        losses.append(float(total / count))
        print(f"epoch {done}/{epochs}: {losses[-1]:.4f}", file=sys.stderr)
        save_checkpoint(ckpt_path, model=model, optimizer=optimizer, epoch=done)
    return losses
''',
    },
}
