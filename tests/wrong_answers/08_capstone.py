"""Notebook 08: plausible wrong answers (each must lose its exercise's points) and right answers other than the
solution (other readings of the statement, answers that write to stderr)
(each also takes another road than the solution, so that the suite proves the tests accept it)."""

from course import changed


_ATTENTION = '''
def masked_causal_attention(q, k, v, key_mask=None):
    T = q.shape[-2]
    allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, None, :]
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return weights.masked_fill(~allowed, 0.0) @ v
'''

_STEP = '''
def train_step(model, optimizer, scaler, micro_batches, device_type="cpu", dtype=torch.bfloat16, max_grad_norm=1.0):
    model.train()
    optimizer.zero_grad()
    total = sum(int((y != IGNORE).sum()) for _, y, _ in micro_batches)
    batch_loss = 0.0
    for x, y, mask in micro_batches:
        with torch.autocast(device_type, dtype=dtype):
            loss = F.cross_entropy(model(x, mask).flatten(0, 1), y.flatten(), ignore_index=IGNORE, reduction="sum") / total
        scaler.scale(loss).backward()
        batch_loss += loss.item()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    return batch_loss
'''

_DOMINANT = '''
def dominant_op(fn, *args):
    fn(*args)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(*args)
    return max(prof.key_averages(), key=lambda event: event.self_cpu_time_total).key
'''

_RESUME = '''
def save_state(path, *, model, optimizer, scaler, step, generator):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
                "step": step,
                "rng": {"torch": torch.get_rng_state(), "generator": generator.get_state(), "python": random.getstate(),
                        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}}, path)


def load_state(path, *, model, optimizer, scaler, generator):
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["rng"]["torch"])
    generator.set_state(state["rng"]["generator"])
    random.setstate(state["rng"]["python"])
    if torch.cuda.is_available() and state["rng"]["cuda"]:
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    return state["step"]
'''


def _ranked_by(key: str) -> str:
    """dominant_op ranking the events by `key` (an expression of `event`) instead of their self CPU time."""
    return changed(_DOMINANT, ("key=lambda event: event.self_cpu_time_total", f"key=lambda event: {key}"))


def _load_without(statement: str) -> str:
    """load_state without one of its statements (a whole line of its body)."""
    return changed(_RESUME, (f"    {statement}\n", ""))


WRONG = {
    "ex1_masked_attention": {
        "no causal mask: each query sees the characters after it": changed(
            _ATTENTION, ("    allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()\n",
                         "    allowed = torch.ones(T, T, dtype=torch.bool, device=q.device)\n")),
        "the padding mask is ignored": changed(
            _ATTENTION, ("    if key_mask is not None:\n        allowed = allowed & key_mask[:, None, None, :]\n", "")),
        "the mask applied after the softmax: the weights of the allowed keys no longer add up to 1": changed(
            _ATTENTION, ('    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)\n',
                         '    weights = torch.softmax(scores, dim=-1)\n')),
        "-1e9 instead of -inf: a query with no allowed key averages every value": changed(
            _ATTENTION, ('    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)\n'
                         '    return weights.masked_fill(~allowed, 0.0) @ v\n',
                         '    return torch.softmax(scores.masked_fill(~allowed, -1e9), dim=-1) @ v\n')),
        "a query with no allowed key is left with NaN (softmax over nothing)": changed(
            _ATTENTION, ("    return weights.masked_fill(~allowed, 0.0) @ v\n", "    return weights @ v\n")),
        "scaled by 1/D instead of 1/sqrt(D)": changed(
            _ATTENTION, ("    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])\n",
                         "    scores = (q @ k.transpose(-2, -1)) / q.shape[-1]\n")),
        "the padding mask laid along the queries instead of the keys": changed(
            _ATTENTION, ("        allowed = allowed & key_mask[:, None, None, :]\n",
                         "        allowed = allowed & key_mask[:, None, :, None]\n")),
        "the causal mask made on the CPU whatever the inputs' device": changed(
            _ATTENTION, ("dtype=torch.bool, device=q.device).tril()", "dtype=torch.bool).tril()")),
        "the scores computed in float32 whatever the inputs' dtype": changed(
            _ATTENTION, ("    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])\n",
                         "    scores = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])\n")),
        "an additive -inf mask, then nan_to_num: zeros out where no key is allowed, but NaN gradients": changed(
            _ATTENTION, ('    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)\n'
                         '    return weights.masked_fill(~allowed, 0.0) @ v\n',
                         '    bias = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device).masked_fill(~allowed, float("-inf"))\n'
                         '    return torch.softmax(scores + bias, dim=-1).nan_to_num(0.0) @ v\n')),
        "F.scaled_dot_product_attention called instead of written out": '''
def masked_causal_attention(q, k, v, key_mask=None):
    return attention(q, k, v, key_mask)
''',
        # issue 40: refused by its Python name, the same operator was reachable by another (14/14 then)
        "scaled_dot_product_attention reached through torch.ops.aten, not F": '''
def masked_causal_attention(q, k, v, key_mask=None):
    T = q.shape[-2]
    allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, None, :]
    out = torch.ops.aten.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return out.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)
''',
    },
    "ex2_train_step": {
        "the mean of the micro-batches' means: padding weighs unequal micro-batches equally": changed(
            _STEP, ('            loss = F.cross_entropy(model(x, mask).flatten(0, 1), y.flatten(), ignore_index=IGNORE, reduction="sum") / total\n',
                    '            loss = F.cross_entropy(model(x, mask).flatten(0, 1), y.flatten(), ignore_index=IGNORE) / len(micro_batches)\n')),
        "each micro-batch's mean loss, not divided: the gradients add up to several times the batch's": changed(
            _STEP, ('            loss = F.cross_entropy(model(x, mask).flatten(0, 1), y.flatten(), ignore_index=IGNORE, reduction="sum") / total\n',
                    '            loss = F.cross_entropy(model(x, mask).flatten(0, 1), y.flatten(), ignore_index=IGNORE)\n')),
        "clipping before unscale_: the scaled gradients are clipped": changed(
            _STEP, ("    scaler.unscale_(optimizer)\n    nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n",
                    "    nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n    scaler.unscale_(optimizer)\n")),
        "no zero_grad: stale gradients join the step": changed(_STEP, ("    optimizer.zero_grad()\n", "")),
        "autocast to bfloat16 whatever dtype is asked for": changed(
            _STEP, ("torch.autocast(device_type, dtype=dtype)", "torch.autocast(device_type, dtype=torch.bfloat16)")),
        "no autocast: the forward runs in float32": changed(
            _STEP, ("        with torch.autocast(device_type, dtype=dtype):\n            loss = ",
                    "        if True:\n            loss = ")),
        "an optimizer step after every micro-batch": changed(
            _STEP, ("        batch_loss += loss.item()\n    scaler.unscale_(optimizer)\n    nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n    scaler.step(optimizer)\n    scaler.update()\n",
                    "        batch_loss += loss.item()\n        scaler.unscale_(optimizer)\n        nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n        scaler.step(optimizer)\n        scaler.update()\n        optimizer.zero_grad()\n")),
        "no scaler.update(): the scale never changes": changed(_STEP, ("    scaler.update()\n", "")),
        "the model left in eval mode: no dropout while training": changed(_STEP, ("    model.train()\n", "")),
        "backward of the loss itself, not of the scaled loss": changed(
            _STEP, ("        scaler.scale(loss).backward()\n", "        loss.backward()\n")),
        "no clipping": changed(_STEP, ("    nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)\n", "")),
        "optimizer.step() instead of scaler.step(optimizer): a step whose gradients hold inf is taken": changed(
            _STEP, ("    scaler.step(optimizer)\n", "    optimizer.step()\n")),
        "the batch's loss returned as a 0-dim tensor, not a float": changed(
            _STEP, ("        batch_loss += loss.item()\n", "        batch_loss += loss.detach()\n")),
    },
    "ex3_dominant_op": {
        "total CPU time instead of self time: the operator that calls the others wins": _ranked_by("event.cpu_time_total"),
        "the operator called most often": _ranked_by("event.count"),
        "the longest time per call instead of the total over calls": _ranked_by("event.self_cpu_time_total / event.count"),
        "no warm-up call: the first call's set-up is profiled": changed(_DOMINANT, ("    fn(*args)\n    with", "    with")),
        "aten:: operators only: a record_function label with the most self time is passed over": changed(
            _DOMINANT, ("max(prof.key_averages(),", "max([e for e in prof.key_averages() if e.key.startswith(\"aten::\")],")),
        "the first operator of the profile": changed(
            _DOMINANT, ("    return max(prof.key_averages(), key=lambda event: event.self_cpu_time_total).key\n",
                        "    return prof.key_averages()[0].key\n")),
    },
    "ex4_resume": {
        "the batch generator's state is not restored: the resumed run trains on other batches":
            _load_without('generator.set_state(state["rng"]["generator"])'),
        "torch's global RNG state is not restored: other dropout masks": _load_without('torch.set_rng_state(state["rng"]["torch"])'),
        "the optimizer's state is not restored: AdamW restarts its averages":
            _load_without('optimizer.load_state_dict(state["optimizer"])'),
        "the scaler's state is not restored": _load_without('scaler.load_state_dict(state["scaler"])'),
        "Python's random state is not restored": _load_without('random.setstate(state["rng"]["python"])'),
        "weights_only=False: runs whatever the file holds": changed(
            _RESUME, ('map_location="cpu", weights_only=True)', 'map_location="cpu", weights_only=False)')),
        "the step after the saved one is returned": changed(_RESUME, ('    return state["step"]\n', '    return state["step"] + 1\n')),
    },
}


ALSO_RIGHT = {
    "ex1_masked_attention": {
        "prints the shapes to stderr, and zeroes empty rows with torch.where after a finite fill": '''
import sys
def masked_causal_attention(q, k, v, key_mask=None):
    print("attention of", tuple(q.shape), file=sys.stderr)
    B, H, T, D = q.shape
    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool, device=q.device)).expand(B, 1, T, T)
    if key_mask is not None:
        allowed = allowed & key_mask.view(B, 1, 1, T)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * D ** -0.5
    scores = torch.where(allowed, scores, torch.finfo(scores.dtype).min)
    weights = torch.where(allowed, scores.softmax(dim=-1), torch.zeros((), dtype=q.dtype, device=q.device))
    return torch.einsum("bhij,bhjd->bhid", weights, v)
''',
    },
    "ex2_train_step": {
        "warns about the gradient norm, and masks an unreduced loss instead of ignore_index": '''
import warnings
def train_step(model, optimizer, scaler, micro_batches, device_type="cpu", dtype=torch.bfloat16, max_grad_norm=1.0):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    targets = sum((y != IGNORE).sum() for _, y, _ in micro_batches)
    losses = []
    for x, y, mask in micro_batches:
        with torch.autocast(device_type, dtype=dtype):
            logits = model(x, mask)
            per_target = F.cross_entropy(logits.transpose(1, 2), y.clamp(min=0), reduction="none")
            loss = (per_target * (y != IGNORE)).sum() / targets
        scaler.scale(loss).backward()
        losses.append(loss.detach())
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    warnings.warn(f"gradient norm {float(norm):.3f}")
    scaler.step(optimizer)
    scaler.update()
    return float(sum(losses))
''',
    },
    "ex3_dominant_op": {
        "prints the profile's table to stderr, and sorts the events instead of taking the max": '''
import sys
def dominant_op(fn, *args):
    for _ in range(2):
        fn(*args)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn(*args)
    events = prof.key_averages()
    print(events.table(sort_by="self_cpu_time_total", row_limit=5), file=sys.stderr)
    return sorted(events, key=lambda e: e.self_cpu_time_total)[-1].key
''',
    },
    "ex4_resume": {
        "writes atomically and says so on stderr": "\nimport sys\n" + changed(
            _RESUME, ('                        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}}, path)\n',
                      '                        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}}, f"{path}.tmp")\n'
                      '    os.replace(f"{path}.tmp", path)\n    print(f"saved step {step} to {path}", file=sys.stderr)\n')),
    },
}
