"""Notebook 04: plausible wrong answers (each must lose its exercise's points) and right answers other than the
solution (other readings of the statement, answers that write to stderr)."""

_TRAIN = '''
def train_one_epoch(model, loader, loss_fn, optimizer, device, max_grad_norm=None):
    model.train()
    total, count = 0.0, 0
    for xb, yb in loader:
        xb, yb = xb.to(device), yb.to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        total += loss.item() * len(yb)
        count += len(yb)
    return total / count
'''
_EVALUATE = '''
def evaluate(model, loader, loss_fn, device):
    was_training = model.training
    model.eval()
    total, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            out = model(xb)
            total += loss_fn(out, yb).item() * len(yb)
            correct += (out.argmax(dim=1) == yb).sum().item()
            count += len(yb)
    model.train(was_training)
    return total / count, correct / count
'''
_LR_FIND = '''
def lr_find(model, loader, loss_fn, optimizer, start_lr=1e-7, end_lr=10.0, num_iter=100, smooth=0.05,
            diverge=5.0, device=None):
    if num_iter < 2 or not 0 <= smooth < 1:
        raise ValueError("bad arguments")
    device = device if device is not None else next(model.parameters()).device
    model_state = copy.deepcopy(model.state_dict())
    optimizer_state = copy.deepcopy(optimizer.state_dict())
    was_training = model.training
    lrs, losses = [], []
    try:
        model.train()
        batches = iter(loader)
        for i in range(num_iter):
            lr = start_lr * (end_lr / start_lr) ** (i / (num_iter - 1))
            for group in optimizer.param_groups:
                group["lr"] = lr
            try:
                xb, yb = next(batches)
            except StopIteration:
                batches = iter(loader)
                xb, yb = next(batches)
            optimizer.zero_grad()
            loss = loss_fn(model(xb.to(device)), yb.to(device))
            loss.backward()
            optimizer.step()
            value = loss.item() if i == 0 or smooth == 0 else smooth * loss.item() + (1 - smooth) * losses[-1]
            lrs.append(lr)
            losses.append(value)
            if not math.isfinite(value) or value > diverge * min(losses):
                break
    finally:
        model.load_state_dict(model_state)
        optimizer.load_state_dict(optimizer_state)
        model.train(was_training)
    return lrs, losses
'''


def _changed(code: str, old: str, new: str) -> str:
    """code with old replaced by new, where old must occur exactly once (so that a wrong answer is what it says)."""
    assert code.count(old) == 1, f"{old!r} occurs {code.count(old)} times"
    return code.replace(old, new)


_PAD = '''
def pad_collate(batch):
    sequences, labels = zip(*batch)
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.int64)
    padded = torch.zeros(len(sequences), int(lengths.max()), dtype=sequences[0].dtype)
    for row, s in enumerate(sequences):
        padded[row, :len(s)] = s
    mask = torch.arange(padded.shape[1]) < lengths[:, None]
    return padded, lengths, mask, torch.tensor([int(label) for label in labels], dtype=torch.int64)
'''
_DIGITS = '''
class DigitsDataset(Dataset):
    def __init__(self, path):
        table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64)
        self.features = torch.from_numpy(table[:, :64]).float() / 16
        self.labels = torch.from_numpy(table[:, 64])

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.features[i], self.labels[i]
'''
_SUGGEST = '''
def suggest_lr(lrs, losses, skip_start=10, skip_end=5):
    end = len(losses) - skip_end
    kept = [(lr, loss) for lr, loss in zip(lrs[skip_start:end], losses[skip_start:end]) if math.isfinite(loss)]
    if len(kept) < 2:
        raise ValueError(f"need at least 2 finite points after skipping, got {len(kept)}")
    slopes = np.gradient(np.array([loss for _, loss in kept]))
    return float(kept[int(np.argmin(slopes))][0])
'''

WRONG = {
    "ex1_digits_dataset": {
        "pixels scaled by 255 as for 8-bit images": '''
class DigitsDataset(Dataset):
    def __init__(self, path):
        table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64)
        self.features = torch.from_numpy(table[:, :64]).float() / 255
        self.labels = torch.from_numpy(table[:, 64])

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.features[i], self.labels[i]
''',
        "labels as float, the way the CSV stores numbers": '''
class DigitsDataset(Dataset):
    def __init__(self, path):
        table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32)
        self.features = torch.from_numpy(table[:, :64]) / 16
        self.labels = torch.from_numpy(table[:, 64])

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.features[i], self.labels[i]
''',
        "features left as float64 from NumPy": '''
class DigitsDataset(Dataset):
    def __init__(self, path):
        table = np.loadtxt(path, delimiter=",", skiprows=1)
        self.features = torch.from_numpy(table[:, :64] / 16)
        self.labels = torch.from_numpy(table[:, 64]).long()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.features[i], self.labels[i]
''',
        "converted in __getitem__, every time an item is read": '''
class DigitsDataset(Dataset):
    def __init__(self, path):
        self.table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64)

    def __len__(self):
        return len(self.table)

    def __getitem__(self, i):
        return torch.from_numpy(self.table[i, :64]).float() / 16, torch.tensor(self.table[i, 64])
''',
        "the header row not skipped": _DIGITS.replace("skiprows=1, ", ""),
        "labels of shape (1,) (a slice 64:65), not scalars": _changed(
            _DIGITS, "self.labels = torch.from_numpy(table[:, 64])", "self.labels = torch.from_numpy(table[:, 64:65])"),
        "pixels kept as integers in __init__, scaled in __getitem__ with .float() / 16 on every read": _changed(_changed(
            _DIGITS, "self.features = torch.from_numpy(table[:, :64]).float() / 16", "self.features = torch.from_numpy(table[:, :64])"),
            "return self.features[i], self.labels[i]", "return self.features[i].float() / 16, self.labels[i]"),
        "float32 made in __init__, scaled in __getitem__ (a new tensor on every read)": _changed(_changed(
            _DIGITS, "self.features = torch.from_numpy(table[:, :64]).float() / 16", "self.features = torch.from_numpy(table[:, :64]).float()"),
            "return self.features[i], self.labels[i]", "return self.features[i] * (1 / 16), self.labels[i]"),
    },
    "ex2_pad_collate": {
        "sorted by length, losing the input order": _PAD.replace(
            "    sequences, labels = zip(*batch)\n",
            "    sequences, labels = zip(*sorted(batch, key=lambda item: len(item[0]), reverse=True))\n"),
        "padded at the front": _PAD.replace("padded[row, :len(s)] = s", "padded[row, padded.shape[1] - len(s):] = s"),
        "a float padding tensor whatever the input dtype": _PAD.replace(
            "torch.zeros(len(sequences), int(lengths.max()), dtype=sequences[0].dtype)",
            "torch.zeros(len(sequences), int(lengths.max()))"),
        "padded with -1 instead of 0": _PAD.replace("torch.zeros(len(sequences), int(lengths.max()), dtype=sequences[0].dtype)",
                                                     "torch.full((len(sequences), int(lengths.max())), -1, dtype=sequences[0].dtype)"),
        "the mask inverted (True at the pads)": _PAD.replace(
            "mask = torch.arange(padded.shape[1]) < lengths[:, None]", "mask = torch.arange(padded.shape[1]) >= lengths[:, None]"),
        "a mask of 0s and 1s (int64) instead of bool": _PAD.replace(
            "mask = torch.arange(padded.shape[1]) < lengths[:, None]", "mask = (torch.arange(padded.shape[1]) < lengths[:, None]).long()"),
        "a float mask, ready to multiply": _PAD.replace(
            "mask = torch.arange(padded.shape[1]) < lengths[:, None]", "mask = (torch.arange(padded.shape[1]) < lengths[:, None]).float()"),
        "the mask transposed, (T_max, B)": _PAD.replace(
            "mask = torch.arange(padded.shape[1]) < lengths[:, None]", "mask = torch.arange(padded.shape[1])[:, None] < lengths"),
        "the mask taken from the values (padded != 0), wrong when a sequence holds 0": _PAD.replace(
            "mask = torch.arange(padded.shape[1]) < lengths[:, None]", "mask = padded != 0"),
        "lengths as int32": _changed(_PAD, "dtype=torch.int64)\n    padded", "dtype=torch.int32)\n    padded"),
        "lengths as a Python list": _PAD.replace(
            "return padded, lengths, mask,", "return padded, lengths.tolist(), mask,"),
        "labels stacked, which fails on Python ints": _PAD.replace(
            "torch.tensor([int(label) for label in labels], dtype=torch.int64)", "torch.stack(labels)"),
        "labels as float": _PAD.replace(
            "torch.tensor([int(label) for label in labels], dtype=torch.int64)", "torch.tensor([float(label) for label in labels])"),
    },
    "ex3_train_and_evaluate": {
        "the loss averaged per batch instead of per sample": _TRAIN.replace(
            "total += loss.item() * len(yb)\n        count += len(yb)", "total += loss.item()\n        count += 1") + _EVALUATE,
        "evaluation without eval mode": _TRAIN + _EVALUATE.replace("    model.eval()\n", ""),
        "evaluate leaves the model in eval mode": _TRAIN + _EVALUATE.replace("    model.train(was_training)\n", ""),
        "evaluation that builds a graph (no no_grad)": _TRAIN + _EVALUATE.replace(
            "    with torch.no_grad():\n        for", "    if True:\n        for"),
        "max_grad_norm ignored": _TRAIN.replace(
            "        if max_grad_norm is not None:\n            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n",
            "") + _EVALUATE,
        "gradients never zeroed": _TRAIN.replace("        optimizer.zero_grad()\n", "") + _EVALUATE,
        "training left in the mode the model was in": _TRAIN.replace("    model.train()\n", "") + _EVALUATE,
        "evaluate averages the batch means": _TRAIN + _EVALUATE.replace(
            "total += loss_fn(out, yb).item() * len(yb)", "total += loss_fn(out, yb).item()").replace(
            "return total / count, correct / count", "return total / len(loader), correct / count"),
        "evaluate returns 0-dim tensors, not Python floats": _TRAIN + _changed(
            _EVALUATE, "return total / count, correct / count", "return torch.tensor(total / count), torch.tensor(correct / count)"),
        "evaluate returns the number of correct answers": _TRAIN + _EVALUATE.replace(
            "return total / count, correct / count", "return total / count, correct"),
        "evaluate ends with model.train(), whatever mode the model came in": _TRAIN + _changed(
            _EVALUATE, "model.train(was_training)", "model.train()"),
        "train_one_epoch returns a 0-dim tensor, not a float": _changed(
            _TRAIN, "total += loss.item() * len(yb)", "total += loss.detach() * len(yb)") + _EVALUATE,
        "batches never moved to device": _changed(_TRAIN, "        xb, yb = xb.to(device), yb.to(device)\n", "") + _changed(
            _EVALUATE, "            xb, yb = xb.to(device), yb.to(device)\n", ""),
        "the model moved to device instead of the batches": _changed(_changed(
            _TRAIN, "        xb, yb = xb.to(device), yb.to(device)\n", ""), "    model.train()\n", "    model.train()\n    model.to(device)\n"
        ) + _changed(_changed(_EVALUATE, "            xb, yb = xb.to(device), yb.to(device)\n", ""),
                     "    model.eval()\n", "    model.eval()\n    model.to(device)\n"),
    },
    "ex4_accumulate_gradients": {
        "accumulation without dividing the loss": '''
def accumulate_gradients(model, loss_fn, x, y, micro_batch):
    model.zero_grad()
    for xs, ys in zip(x.split(micro_batch), y.split(micro_batch)):
        loss_fn(model(xs), ys).backward()
''',
        "divided by the number of chunks, wrong when the last chunk is smaller": '''
def accumulate_gradients(model, loss_fn, x, y, micro_batch):
    model.zero_grad()
    chunks = list(zip(x.split(micro_batch), y.split(micro_batch)))
    for xs, ys in chunks:
        (loss_fn(model(xs), ys) / len(chunks)).backward()
''',
        "old gradients not cleared first": '''
def accumulate_gradients(model, loss_fn, x, y, micro_batch):
    for xs, ys in zip(x.split(micro_batch), y.split(micro_batch)):
        (loss_fn(model(xs), ys) * len(xs) / len(x)).backward()
''',
        "the whole batch in one forward, ignoring micro_batch": '''
def accumulate_gradients(model, loss_fn, x, y, micro_batch):
    model.zero_grad()
    loss_fn(model(x), y).backward()
''',
    },
    "ex5_lr_find": {
        "the schedule off by one step": _changed(_LR_FIND, "** (i / (num_iter - 1))", "** ((i + 1) / num_iter)"),
        "the optimizer not restored": _changed(_LR_FIND, "        optimizer.load_state_dict(optimizer_state)\n", ""),
        "the smoothing weights swapped": _changed(
            _LR_FIND, "smooth * loss.item() + (1 - smooth) * losses[-1]", "(1 - smooth) * loss.item() + smooth * losses[-1]"),
        "smooth=0 freezes the curve instead of switching smoothing off":
            _changed(_LR_FIND, "if i == 0 or smooth == 0 else", "if i == 0 else"),
        "no stop when the loss diverges": _changed(
            _LR_FIND, "            if not math.isfinite(value) or value > diverge * min(losses):\n                break\n", ""),
        "divergence measured against the first loss, not the lowest so far": _changed(
            _LR_FIND, "value > diverge * min(losses)", "value > diverge * losses[0]"),
        "an error in a step swallowed: the points recorded so far returned": _changed(
            _LR_FIND, "    finally:\n", "    except Exception:\n        pass\n    finally:\n"),
        "no stop on nan (only the divergence test)": _changed(_LR_FIND, "if not math.isfinite(value) or value >", "if value >"),
        "the point that stops the run not recorded": _changed(
            _LR_FIND,
            "            lrs.append(lr)\n            losses.append(value)\n"
            "            if not math.isfinite(value) or value > diverge * min(losses):\n                break\n",
            "            if not math.isfinite(value) or value > diverge * min(losses + [value]):\n                break\n"
            "            lrs.append(lr)\n            losses.append(value)\n"),
        "forward in whatever mode the model was in": _changed(_LR_FIND, "        model.train()\n        batches", "        batches"),
        "gradients never zeroed": _changed(_LR_FIND, "            optimizer.zero_grad()\n", ""),
        "gradients zeroed after the step, so old ones reach the first step": _changed(_changed(
            _LR_FIND, "            optimizer.zero_grad()\n", ""), "            optimizer.step()\n",
            "            optimizer.step()\n            optimizer.zero_grad()\n"),
        "only the first parameter group's learning rate set": _changed(
            _LR_FIND, '            for group in optimizer.param_groups:\n                group["lr"] = lr\n',
            '            optimizer.param_groups[0]["lr"] = lr\n'),
        "batches never moved to device": _changed(_LR_FIND, "model(xb.to(device)), yb.to(device)", "model(xb), yb"),
        "only the inputs moved to device, not the targets": _changed(_LR_FIND, "model(xb.to(device)), yb.to(device)", "model(xb.to(device)), yb"),
        "the loader not restarted: stops when it runs out": _changed(
            _LR_FIND, "                batches = iter(loader)\n                xb, yb = next(batches)\n", "                break\n"),
        "no check of num_iter and smooth": _changed(
            _LR_FIND, "    if num_iter < 2 or not 0 <= smooth < 1:\n        raise ValueError(\"bad arguments\")\n", ""),
        "returns NumPy arrays": _changed(_LR_FIND, "    return lrs, losses", "    return np.array(lrs), np.array(losses)"),
        "losses recorded as 0-d tensors": _changed(
            _LR_FIND, "value = loss.item() if i == 0 or smooth == 0 else smooth * loss.item() + (1 - smooth) * losses[-1]",
            "value = loss.detach() if i == 0 or smooth == 0 else smooth * loss.detach() + (1 - smooth) * losses[-1]"),
        "state dicts kept without a deep copy": _changed(_changed(
            _LR_FIND, "copy.deepcopy(model.state_dict())", "model.state_dict()"),
            "copy.deepcopy(optimizer.state_dict())", "optimizer.state_dict()"),
        "parameters restored, buffers not": _changed(_changed(
            _LR_FIND, "model_state = copy.deepcopy(model.state_dict())", "model_state = [p.detach().clone() for p in model.parameters()]"),
            "        model.load_state_dict(model_state)\n",
            "        with torch.no_grad():\n            for p, saved in zip(model.parameters(), model_state):\n                p.copy_(saved)\n"),
        "only the learning rate restored, not Adam's state": _changed(_changed(
            _LR_FIND, "optimizer_state = copy.deepcopy(optimizer.state_dict())", "old_lrs = [g['lr'] for g in optimizer.param_groups]"),
            "        optimizer.load_state_dict(optimizer_state)\n",
            "        for g, lr in zip(optimizer.param_groups, old_lrs):\n            g['lr'] = lr\n"),
        "the model left in train mode": _changed(_LR_FIND, "        model.train(was_training)\n", ""),
        "restored only on a normal return (no finally), not when a step raises": _changed(_changed(
            _LR_FIND, "    try:\n        model.train()\n", "    if True:\n        model.train()\n"),
            "    finally:\n", "    if True:\n"),
    },
    "ex6_suggest_lr": {
        "skip_end=0 slices everything away": '''
def suggest_lr(lrs, losses, skip_start=10, skip_end=5):
    lrs, losses = lrs[skip_start:-skip_end], losses[skip_start:-skip_end]
    kept = [(lr, loss) for lr, loss in zip(lrs, losses) if math.isfinite(loss)]
    if len(kept) < 2:
        raise ValueError(f"need at least 2 points, got {len(kept)}")
    return float(kept[int(np.argmin(np.gradient([loss for _, loss in kept])))][0])
''',
        "the lowest loss instead of the steepest descent": '''
def suggest_lr(lrs, losses, skip_start=10, skip_end=5):
    end = len(losses) - skip_end
    kept = [(lr, loss) for lr, loss in zip(lrs[skip_start:end], losses[skip_start:end]) if math.isfinite(loss)]
    if len(kept) < 2:
        raise ValueError(f"need at least 2 points, got {len(kept)}")
    return float(min(kept, key=lambda p: p[1])[0])
''',
        "non-finite losses kept": '''
def suggest_lr(lrs, losses, skip_start=10, skip_end=5):
    end = len(losses) - skip_end
    kept = list(zip(lrs[skip_start:end], losses[skip_start:end]))
    if len(kept) < 2:
        raise ValueError(f"need at least 2 points, got {len(kept)}")
    return float(kept[int(np.argmin(np.gradient([loss for _, loss in kept])))][0])
''',
        "non-finite losses dropped before skipping": '''
def suggest_lr(lrs, losses, skip_start=10, skip_end=5):
    finite = [(lr, loss) for lr, loss in zip(lrs, losses) if math.isfinite(loss)]
    kept = finite[skip_start:len(finite) - skip_end]
    if len(kept) < 2:
        raise ValueError(f"need at least 2 finite points after skipping, got {len(kept)}")
    return float(kept[int(np.argmin(np.gradient([loss for _, loss in kept])))][0])
''',
        "the index of the steepest drop instead of its learning rate": _SUGGEST.replace(
            "return float(kept[int(np.argmin(slopes))][0])", "return float(skip_start + int(np.argmin(slopes)))"),
        "the error message without the counts": _SUGGEST.replace(
            'f"need at least 2 finite points after skipping, got {len(kept)}"', '"not enough points"'),
        "the gradient of all the losses, taken before any point is dropped (then the steepest kept point)": '''
def suggest_lr(lrs, losses, skip_start=10, skip_end=5):
    slopes = np.gradient(np.array(losses, dtype=float))
    kept = [i for i in range(skip_start, len(losses) - skip_end) if math.isfinite(losses[i])]
    if len(kept) < 2:
        raise ValueError(f"need at least 2 finite points after skipping, got {len(kept)}")
    return float(lrs[min(kept, key=lambda i: slopes[i])])
''',
        "the last of several tied points, not the first": _changed(
            _SUGGEST, "return float(kept[int(np.argmin(slopes))][0])",
            "return float(kept[len(slopes) - 1 - int(np.argmin(slopes[::-1]))][0])"),
        "the gradient taken against the learning rates, not with numpy.gradient's default spacing": _changed(
            _SUGGEST, "slopes = np.gradient(np.array([loss for _, loss in kept]))",
            "slopes = np.gradient(np.array([loss for _, loss in kept]), np.array([lr for lr, _ in kept]))"),
        "returns a NumPy float64, not a Python float": _changed(
            _SUGGEST, "return float(kept[int(np.argmin(slopes))][0])", "return np.float64(kept[int(np.argmin(slopes))][0])"),
        "no check: NumPy's own error": _SUGGEST.replace(
            "    if len(kept) < 2:\n        raise ValueError(f\"need at least 2 finite points after skipping, got {len(kept)}\")\n", ""),
    },
}

ALSO_RIGHT = {
    "ex4_accumulate_gradients": {
        "prints each chunk to stderr": '''
import sys

def accumulate_gradients(model, loss_fn, x, y, micro_batch):
    model.zero_grad(set_to_none=True)
    for xs, ys in zip(x.split(micro_batch), y.split(micro_batch)):
        print("chunk of", len(xs), file=sys.stderr)
        (loss_fn(model(xs), ys) * (len(xs) / len(x))).backward()
''',
    },
    "ex5_lr_find": {
        "warns when it stops early": _changed(
            _LR_FIND, "                break\n", "                warnings.warn(f'stopped early at step {i}')\n                break\n"),
    },
}
