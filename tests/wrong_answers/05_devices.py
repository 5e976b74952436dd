"""Notebook 05: plausible wrong answers (each must lose its exercise's points) and right answers other than the
solution (other readings of the statement, answers that write to stderr)."""

from course import changed

_AMP = '''
def amp_train_step(model, x, y, loss_fn, optimizer, scaler, device_type, dtype, max_grad_norm=None):
    model.train()
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    if max_grad_norm is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
'''
_UNSCALE_THEN_CLIP = ("        scaler.unscale_(optimizer)\n"
                      "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n")

_ACCUMULATE = '''
def accumulated_amp_step(model, micro_batches, loss_fn, optimizer, scaler, device_type, dtype, max_grad_norm=None):
    model.train()
    optimizer.zero_grad()
    total = 0.0
    for x, y in micro_batches:
        with torch.autocast(device_type, dtype=dtype):
            loss = loss_fn(model(x), y) / len(micro_batches)
        scaler.scale(loss).backward()
        total += loss.item()
    if max_grad_norm is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    return total
'''
_ONCE_PER_STEP = ("    if max_grad_norm is not None:\n"
                  "        scaler.unscale_(optimizer)\n"
                  "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n"
                  "    scaler.step(optimizer)\n"
                  "    scaler.update()\n")

_AVAILABLE = '    available = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available(), "cpu": True}\n'
_PICK = f'''
def pick_device(prefer=None):
{_AVAILABLE}    if prefer is None:
        return torch.device(next(name for name, ok in available.items() if ok))
    if prefer not in tuple(available):
        raise ValueError(prefer)
    if not available[prefer]:
        raise RuntimeError(f"{{prefer}} is not available")
    return torch.device(prefer)
'''

WRONG = {
    "ex1_pick_device": {
        "ignores prefer": '''
def pick_device(prefer=None):
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
''',
        "returns a string": changed(_PICK, ("    return torch.device(prefer)\n", "    return prefer\n"), (
            "        return torch.device(next(name for name, ok in available.items() if ok))\n",
            "        return next(name for name, ok in available.items() if ok)\n")),
        "tries mps before cuda": changed(_PICK, (_AVAILABLE, _AVAILABLE.replace(
            '"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()',
            '"mps": torch.backends.mps.is_available(), "cuda": torch.cuda.is_available()'))),
        "unknown names raise RuntimeError, not ValueError": changed(_PICK, (
            "    if prefer not in tuple(available):\n        raise ValueError(prefer)\n"
            "    if not available[prefer]:\n", "    if not available.get(prefer, False):\n")),
        "falls back to the best device instead of raising for a missing one": '''
def pick_device(prefer=None):
    available = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available(), "cpu": True}
    if prefer is not None and prefer not in available:
        raise ValueError(prefer)
    if prefer is not None and available[prefer]:
        return torch.device(prefer)
    return torch.device(next(name for name, ok in available.items() if ok))
''',
        "the error does not name the missing device": changed(_PICK, (
            'f"{prefer} is not available"', '"the device you asked for is not available"')),
        "treats every falsy prefer as no preference (if not prefer)": changed(_PICK, ("    if prefer is None:\n",
                                                                                       "    if not prefer:\n")),
        "looks prefer up in a dict: an unhashable prefer ([]) raises TypeError, not ValueError": changed(_PICK, (
            "prefer not in tuple(available)", "prefer not in available")),
        "accepts whatever torch.device accepts ('cuda:0', a torch.device) by its type": '''
def pick_device(prefer=None):
    available = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available(), "cpu": True}
    if prefer is None:
        return torch.device(next(name for name, ok in available.items() if ok))
    try:
        kind = torch.device(prefer).type
    except (RuntimeError, TypeError):
        raise ValueError(prefer) from None
    if kind not in available:
        raise ValueError(prefer)
    if not available[kind]:
        raise RuntimeError(f"{kind} is not available")
    return torch.device(kind)
''',
        "ignores case: 'CPU' is taken for 'cpu'": '''
def pick_device(prefer=None):
    available = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available(), "cpu": True}
    if prefer is None:
        return torch.device(next(name for name, ok in available.items() if ok))
    if not isinstance(prefer, str) or prefer.lower() not in available:
        raise ValueError(prefer)
    if not available[prefer.lower()]:
        raise RuntimeError(f"{prefer} is not available")
    return torch.device(prefer.lower())
''',
    },
    "ex2_amp_train_step": {
        "clips before unscaling: max_norm applies to the scaled gradients": changed(_AMP, (_UNSCALE_THEN_CLIP, (
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n"
            "        scaler.unscale_(optimizer)\n"))),
        "scaler.step without scaler.update: the scale never changes": changed(_AMP, ("    scaler.update()\n", "")),
        "no autocast: everything in fp32": changed(_AMP, (
            "    with torch.autocast(device_type, dtype=dtype):\n        loss", "    loss")),
        "never zeroes the gradients": changed(_AMP, ("    optimizer.zero_grad()\n", "")),
        "never calls model.train()": changed(_AMP, ("    model.train()\n", "")),
        "backward of the unscaled loss": changed(_AMP, ("scaler.scale(loss).backward()", "loss.backward()")),
        "optimizer.step() instead of scaler.step(optimizer)": changed(_AMP, ("scaler.step(optimizer)",
                                                                            "optimizer.step()")),
        "ignores max_grad_norm: never clips": changed(_AMP, ("    if max_grad_norm is not None:\n" + _UNSCALE_THEN_CLIP, "")),
        "ignores dtype: always bfloat16": changed(_AMP, ("dtype=dtype", "dtype=torch.bfloat16")),
        "returns the loss tensor, not a float": changed(_AMP, ("return loss.item()", "return loss.detach()")),
        "calls model.train() after the forward: the forward runs in the mode the model was in": changed(_AMP, (
            "    model.train()\n    optimizer.zero_grad()\n    with torch.autocast(device_type, dtype=dtype):\n"
            "        loss = loss_fn(model(x), y)\n",
            "    optimizer.zero_grad()\n    with torch.autocast(device_type, dtype=dtype):\n"
            "        loss = loss_fn(model(x), y)\n    model.train()\n")),
        "clips each parameter's gradient to max_grad_norm on its own, not their total norm": changed(_AMP, (
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n",
            "        for p in model.parameters():\n            torch.nn.utils.clip_grad_norm_(p, max_grad_norm)\n")),
        "if max_grad_norm: takes max_grad_norm=0.0 for not given": changed(_AMP, (
            "    if max_grad_norm is not None:", "    if max_grad_norm:")),
        "computes the loss outside autocast (on the low-precision logits)": changed(_AMP, (
            "        loss = loss_fn(model(x), y)\n", "        out = model(x)\n    loss = loss_fn(out, y)\n")),
    },
    "ex3_accumulated_amp_step": {
        "zeroes the gradients for every micro-batch: only the last one counts": changed(_ACCUMULATE, (
            "    optimizer.zero_grad()\n    total = 0.0\n    for x, y in micro_batches:\n",
            "    total = 0.0\n    for x, y in micro_batches:\n        optimizer.zero_grad()\n")),
        "does not divide the loss by the number of micro-batches: the gradient is K times too large": changed(
            _ACCUMULATE, (" / len(micro_batches)", "")),
        "steps and updates the scaler after every micro-batch": changed(_ACCUMULATE, (
            "        total += loss.item()\n" + _ONCE_PER_STEP,
            "        total += loss.item()\n" + "".join("    " + line + "\n" for line in _ONCE_PER_STEP.splitlines()))),
        "unscales and clips inside the loop (a second unscale_ raises)": changed(_ACCUMULATE, (
            "        total += loss.item()\n    if max_grad_norm is not None:\n"
            "        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n",
            "        total += loss.item()\n        if max_grad_norm is not None:\n"
            "            scaler.unscale_(optimizer)\n            torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n")),
        "returns the last micro-batch's loss, not the mean": changed(_ACCUMULATE, ("return total", "return loss.item()")),
        "backward of the unscaled loss": changed(_ACCUMULATE, ("scaler.scale(loss).backward()", "loss.backward()")),
        "no autocast: everything in fp32": changed(_ACCUMULATE, (
            "        with torch.autocast(device_type, dtype=dtype):\n            loss", "        loss")),
        "never calls model.train()": changed(_ACCUMULATE, ("    model.train()\n", "")),
        "weights each micro-batch's loss by its share of the samples, not 1/K": changed(_ACCUMULATE, (
            "    total = 0.0\n", "    total = 0.0\n    samples = sum(len(y) for x, y in micro_batches)\n"), (
            " / len(micro_batches)", " * len(y) / samples")),
        "returns the mean weighted by the micro-batches' sizes, not the mean of their losses": changed(_ACCUMULATE, (
            "    total = 0.0\n", "    total = 0.0\n    samples = sum(len(y) for x, y in micro_batches)\n"), (
            "        total += loss.item()\n", "        total += loss.item() * len(micro_batches) * len(y) / samples\n")),
        "calls model.train() after the micro-batches: their forwards run in the mode the model was in": changed(
            _ACCUMULATE, ("    model.train()\n    optimizer.zero_grad()\n", "    optimizer.zero_grad()\n"), (
            "        total += loss.item()\n", "        total += loss.item()\n    model.train()\n")),
        "if max_grad_norm: takes max_grad_norm=0.0 for not given": changed(_ACCUMULATE, (
            "    if max_grad_norm is not None:", "    if max_grad_norm:")),
    },
}

ALSO_RIGHT = {
    "ex1_pick_device": {
        "warns when it falls back to the CPU": '''
def pick_device(prefer=None):
    available = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available(), "cpu": True}
    if prefer is None:
        name = next(name for name, ok in available.items() if ok)
        if name == "cpu":
            import warnings
            warnings.warn("no GPU found: running on the CPU")
        return torch.device(name)
    if prefer not in tuple(available):
        raise ValueError(f"unknown device {prefer!r}")
    if not available[prefer]:
        raise RuntimeError(f"{prefer} is not available")
    return torch.device(prefer)
''',
    },
}
