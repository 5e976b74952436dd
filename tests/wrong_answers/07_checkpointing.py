"""Notebook 07: plausible wrong answers (each must lose its exercise's points) and right answers that write to stderr."""

WRONG = {
    "ex1_save_checkpoint": {
        "not atomic: torch.save straight onto path": '''
def save_checkpoint(path, *, model, optimizer, epoch, scheduler=None, scaler=None, extra=None):
    torch.save({
        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "scaler": None if scaler is None else scaler.state_dict(), "epoch": epoch, "extra": extra,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
    }, path)
''',
        "the temporary file in the system's temp folder, not beside the target": '''
def save_checkpoint(path, *, model, optimizer, epoch, scheduler=None, scaler=None, extra=None):
    state = {
        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "scaler": None if scaler is None else scaler.state_dict(), "epoch": epoch, "extra": extra,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
    }
    fd, tmp = tempfile.mkstemp(suffix=".pt")
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.remove(tmp)
        raise
''',
        "the model object pickled instead of its state_dict": '''
def save_checkpoint(path, *, model, optimizer, epoch, scheduler=None, scaler=None, extra=None):
    state = {
        "model": model, "optimizer": optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "scaler": None if scaler is None else scaler.state_dict(), "epoch": epoch, "extra": extra,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
    }
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.remove(tmp)
        raise
''',
        "a failed write leaves its temporary file behind": '''
def save_checkpoint(path, *, model, optimizer, epoch, scheduler=None, scaler=None, extra=None):
    state = {
        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "scaler": None if scaler is None else scaler.state_dict(), "epoch": epoch, "extra": extra,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
    }
    tmp = os.fspath(path) + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)
''',
    },
    "ex2_load_checkpoint": {
        "weights_only=False: runs whatever the file contains": '''
def load_checkpoint(path, *, model, optimizer=None, scheduler=None, scaler=None, map_location="cpu"):
    try:
        state = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as err:
        raise RuntimeError(f"cannot load {path}: {err}") from err
    model.load_state_dict(state["model"])
    for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler"), (scaler, "scaler")):
        if obj is not None and state[key] is not None:
            obj.load_state_dict(state[key])
    torch.set_rng_state(state["rng"]["torch"].cpu())
    random.setstate(state["rng"]["python"])
    return state
''',
        "weights_only left to torch.load's default, which an environment variable can flip": '''
def load_checkpoint(path, *, model, optimizer=None, scheduler=None, scaler=None, map_location="cpu"):
    try:
        state = torch.load(path, map_location=map_location)
    except Exception as err:
        raise RuntimeError(f"cannot load {path}: {err}") from err
    model.load_state_dict(state["model"])
    for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler"), (scaler, "scaler")):
        if obj is not None and state[key] is not None:
            obj.load_state_dict(state[key])
    torch.set_rng_state(state["rng"]["torch"].cpu())
    random.setstate(state["rng"]["python"])
    return state
''',
        "the RNG states are not restored": '''
def load_checkpoint(path, *, model, optimizer=None, scheduler=None, scaler=None, map_location="cpu"):
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:
        raise RuntimeError(f"cannot load {path}: {err}") from err
    model.load_state_dict(state["model"])
    for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler"), (scaler, "scaler")):
        if obj is not None and state[key] is not None:
            obj.load_state_dict(state[key])
    return state
''',
        "the optimizer's state is not restored": '''
def load_checkpoint(path, *, model, optimizer=None, scheduler=None, scaler=None, map_location="cpu"):
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:
        raise RuntimeError(f"cannot load {path}: {err}") from err
    model.load_state_dict(state["model"])
    for obj, key in ((scheduler, "scheduler"), (scaler, "scaler")):
        if obj is not None and state[key] is not None:
            obj.load_state_dict(state[key])
    torch.set_rng_state(state["rng"]["torch"].cpu())
    random.setstate(state["rng"]["python"])
    return state
''',
        "torch.load's own error for a corrupt file, which does not name the path": '''
def load_checkpoint(path, *, model, optimizer=None, scheduler=None, scaler=None, map_location="cpu"):
    state = torch.load(path, map_location=map_location, weights_only=True)
    model.load_state_dict(state["model"])
    for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler"), (scaler, "scaler")):
        if obj is not None and state[key] is not None:
            obj.load_state_dict(state[key])
    torch.set_rng_state(state["rng"]["torch"].cpu())
    random.setstate(state["rng"]["python"])
    return state
''',
    },
    "ex3_fit": {
        "the resume forgets the optimizer's state": '''
def fit(model, optimizer, loader, loss_fn, epochs, ckpt_path, resume=True):
    start = 0
    if resume and os.path.exists(ckpt_path):
        start = load_checkpoint(ckpt_path, model=model)["epoch"]
    losses = []
    for epoch in range(start, epochs):
        model.train()
        total, count = 0.0, 0
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(x)
            count += len(x)
        losses.append(total / count)
        save_checkpoint(ckpt_path, model=model, optimizer=optimizer, epoch=epoch + 1)
    return losses
''',
        "the mean of the batch losses, not the mean per sample": '''
def fit(model, optimizer, loader, loss_fn, epochs, ckpt_path, resume=True):
    start = 0
    if resume and os.path.exists(ckpt_path):
        start = load_checkpoint(ckpt_path, model=model, optimizer=optimizer)["epoch"]
    losses = []
    for epoch in range(start, epochs):
        model.train()
        batch_losses = []
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            batch_losses.append(loss.item())
        losses.append(sum(batch_losses) / len(batch_losses))
        save_checkpoint(ckpt_path, model=model, optimizer=optimizer, epoch=epoch + 1)
    return losses
''',
        "epochs counted from the resume: trains `epochs` more instead of up to `epochs`": '''
def fit(model, optimizer, loader, loss_fn, epochs, ckpt_path, resume=True):
    start = 0
    if resume and os.path.exists(ckpt_path):
        start = load_checkpoint(ckpt_path, model=model, optimizer=optimizer)["epoch"]
    losses = []
    for epoch in range(start, start + epochs):
        model.train()
        total, count = 0.0, 0
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(x)
            count += len(x)
        losses.append(total / count)
        save_checkpoint(ckpt_path, model=model, optimizer=optimizer, epoch=epoch + 1)
    return losses
''',
        "off by one: the resume skips the epoch after the checkpoint": '''
def fit(model, optimizer, loader, loss_fn, epochs, ckpt_path, resume=True):
    start = 0
    if resume and os.path.exists(ckpt_path):
        start = load_checkpoint(ckpt_path, model=model, optimizer=optimizer)["epoch"] + 1
    losses = []
    for epoch in range(start, epochs):
        model.train()
        total, count = 0.0, 0
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(x)
            count += len(x)
        losses.append(total / count)
        save_checkpoint(ckpt_path, model=model, optimizer=optimizer, epoch=epoch + 1)
    return losses
''',
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
    },
}

NOISY_BUT_RIGHT = {
    "ex1_save_checkpoint": {
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
        except BaseException:
            f.close()
            os.remove(tmp)
            raise
    os.replace(tmp, path)
''',
    },
    "ex3_fit": {
        "prints its progress to stderr": '''
import sys

def fit(model, optimizer, loader, loss_fn, epochs, ckpt_path, resume=True):
    start = 0
    if resume and os.path.exists(ckpt_path):
        start = load_checkpoint(ckpt_path, model=model, optimizer=optimizer)["epoch"]
        print(f"resuming at epoch {start}", file=sys.stderr)
    losses = []
    for epoch in range(start, epochs):
        model.train()
        total, count = 0.0, 0
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(x)
            count += len(x)
        losses.append(total / count)
        print(f"epoch {epoch + 1}: {losses[-1]:.4f}", file=sys.stderr)
        save_checkpoint(ckpt_path, model=model, optimizer=optimizer, epoch=epoch + 1)
    return losses
''',
    },
}
