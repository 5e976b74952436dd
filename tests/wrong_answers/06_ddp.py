"""Notebook 06: plausible wrong answers (each must lose its exercise's points)."""

from course import changed

_DDP_TRAIN = '''
def ddp_train(rank, world_size, steps, per_rank_batch, seed):
    dev = rank_device(rank)
    model = DDP(build_model(seed).to(dev), device_ids=[dev.index] if dev.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    sampler = SAMPLER
    loader = DataLoader(train_data, batch_size=per_rank_batch, sampler=sampler)
    done, epoch = 0, 0
    start = time.perf_counter()
    while done < steps:
        SET_EPOCH
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x.to(dev)), y.to(dev)).backward()
            optimizer.step()
            done += 1
            if done == steps:
                break
        epoch += 1
    seconds = time.perf_counter() - start
    return {"state_dict": RESULT.state_dict(), "samples_per_s": steps * per_rank_batch * world_size / seconds}
'''
_SAMPLER = "DistributedSampler(train_data, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)"


def _ddp(sampler=_SAMPLER, set_epoch="sampler.set_epoch(epoch)", result="model.module"):
    return _DDP_TRAIN.replace("SAMPLER", sampler).replace("SET_EPOCH", set_epoch).replace("RESULT", result)

_FSDP_TRAIN = '''
def fsdp_train(rank, world_size, steps, seed):
    mesh = init_device_mesh("cpu", (world_size,))
    model = build_model(seed)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(steps):
        rows = slice(48 * step, 48 * (step + 1))
        x, y = X_all[rows].chunk(world_size)[rank], y_all[rows].chunk(world_size)[rank]
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return {"local_numel": sum(p.to_local().numel() for p in model.parameters()),
            "params": {name: p.full_tensor() for name, p in model.named_parameters()}}
'''

_BUCKETS = '''
class GradientBuckets:
    def __init__(self, model, bucket_cap):
        self.buckets, bucket = [], []
        for p in reversed([p for p in model.parameters() if p.requires_grad]):
            bucket.append(p)
            if sum(q.numel() for q in bucket) >= bucket_cap:
                self.buckets.append(bucket)
                bucket = []
        if bucket:
            self.buckets.append(bucket)
        self.arrived = [0] * len(self.buckets)
        self.pending = []
        for index, bucket in enumerate(self.buckets):
            for p in bucket:
                p.register_post_accumulate_grad_hook(lambda p, index=index: self.gradient_ready(index))

    def gradient_ready(self, index):
        self.arrived[index] += 1
        if self.arrived[index] == len(self.buckets[index]):
            flat = torch.cat([p.grad.flatten() for p in self.buckets[index]])
            self.pending.append((dist.all_reduce(flat, async_op=True), flat, self.buckets[index]))

    def finish(self):
        for handle, flat, bucket in self.pending:
            handle.wait()
            flat /= dist.get_world_size()
            for p, mean in zip(bucket, flat.split([p.numel() for p in bucket])):
                p.grad.copy_(mean.view_as(p.grad))
        self.pending, self.arrived = [], [0] * len(self.buckets)
'''

WRONG = {
    "ex1_average_gradients": {
        "sums instead of averaging": '''
def average_gradients(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
''',
        "all-reduces a copy: the gradients never change": '''
def average_gradients(model):
    for p in model.parameters():
        if p.grad is not None:
            grad = p.grad.clone()
            dist.all_reduce(grad)
            grad /= dist.get_world_size()
''',
        "divides by the world size without all-reducing": '''
def average_gradients(model):
    for p in model.parameters():
        if p.grad is not None:
            p.grad /= dist.get_world_size()
''',
        "does not skip parameters without a gradient": '''
def average_gradients(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
''',
        "divides by 2, the world size of the visible test, not dist.get_world_size()": '''
def average_gradients(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= 2
''',
    },
    "ex2_ddp_train": {
        "forgets sampler.set_epoch: every epoch repeats the first one's order": _ddp(set_epoch="pass"),
        "every rank reads the whole data set (a sampler for one replica)":
            _ddp(sampler="DistributedSampler(train_data, num_replicas=1, rank=0, shuffle=True, seed=seed)"),
        "returns the DDP wrapper's state_dict (keys start with module.)": _ddp(result="model"),
        "counts epochs, not steps: runs whole epochs": _ddp().replace("            if done == steps:\n                break\n", ""),
        "samples_per_s of this rank alone": _ddp().replace("steps * per_rank_batch * world_size / seconds", "steps * per_rank_batch / seconds"),
        "times the last step alone, not the training loop": changed(
            _ddp(), ("            optimizer.zero_grad()\n", "            start = time.perf_counter()\n            optimizer.zero_grad()\n")),
        "never moves the model to the device (fine on the CPU, wrong on a GPU)":
            changed(_ddp(), ("DDP(build_model(seed).to(dev),", "DDP(build_model(seed),")),
        "device_ids=[rank]: the global rank, not the GPU's index on its machine":
            changed(_ddp(), ("device_ids=[dev.index]", "device_ids=[rank]")),
        "never moves the batches (fine on the CPU, wrong on a GPU)":
            changed(_ddp(), ("model(x.to(dev)), y.to(dev)", "model(x), y")),
        "moves each batch but not its labels": changed(_ddp(), ("y.to(dev)", "y")),
    },
    "ex3_scaling_efficiency": {
        "reports the speed-up T(W) / T(1) as the efficiency": '''
def scaling_efficiency(throughput):
    if 1 not in throughput:
        raise ValueError("throughput[1] is missing")
    return {w: t / throughput[1] for w, t in throughput.items()}
''',
        "applies the formula for times, T(1) / (W T(W)), to throughputs": '''
def scaling_efficiency(throughput):
    if 1 not in throughput:
        raise ValueError("throughput[1] is missing")
    return {w: throughput[1] / (w * t) for w, t in throughput.items()}
''',
        "changes the input dict in place and returns it": '''
def scaling_efficiency(throughput):
    if 1 not in throughput:
        raise ValueError("throughput[1] is missing")
    one = throughput[1]
    for w in throughput:
        throughput[w] = throughput[w] / (w * one)
    return throughput
''',
        "no check: a missing world size 1 raises KeyError": '''
def scaling_efficiency(throughput):
    return {w: t / (w * throughput[1]) for w, t in throughput.items()}
''',
        "leaves world size 1 out of the result": '''
def scaling_efficiency(throughput):
    if 1 not in throughput:
        raise ValueError("throughput[1] is missing")
    return {w: t / (w * throughput[1]) for w, t in throughput.items() if w != 1}
''',
    },
    "ex4_fsdp_train": {
        "local_numel counts p.numel(): a DTensor's numel is the whole parameter's":
            changed(_FSDP_TRAIN, ("p.to_local().numel()", "p.numel()")),
        "builds the optimizer before fully_shard: it holds the replaced parameters, the model never moves": changed(
            _FSDP_TRAIN,
            ("    model = build_model(seed)\n", "    model = build_model(seed)\n    optimizer = torch.optim.SGD(model.parameters(), lr=LR)\n"),
            ("    optimizer = torch.optim.SGD(model.parameters(), lr=LR)\n    for step", "    for step")),
        "returns this rank's blocks (to_local), not the full parameters":
            changed(_FSDP_TRAIN, ("p.full_tensor()", "p.to_local()")),
        "shards only the whole model: one unit, its parameters gathered all at once": changed(_FSDP_TRAIN, (
            "    for layer in model:\n        if isinstance(layer, nn.Linear):\n            fully_shard(layer, mesh=mesh)\n", "")),
        "no mesh: fully_shard's default follows the machine's accelerator, CUDA on a GPU machine":
            _FSDP_TRAIN.replace(", mesh=mesh", "").replace('    mesh = init_device_mesh("cpu", (world_size,))\n', ""),
        "a mesh on CUDA whenever torch.cuda.is_available(), though the ranks use gloo": changed(
            _FSDP_TRAIN, ('init_device_mesh("cpu",', 'init_device_mesh("cuda" if torch.cuda.is_available() else "cpu",')),
        "a mesh on torch.accelerator.current_accelerator(), though the ranks use gloo": changed(_FSDP_TRAIN, (
            'init_device_mesh("cpu",', 'init_device_mesh((torch.accelerator.current_accelerator() or torch.device("cpu")).type,')),
        "every rank trains on all 48 samples of the step (same parameters: the mean of equal means)": changed(
            _FSDP_TRAIN, ("X_all[rows].chunk(world_size)[rank], y_all[rows].chunk(world_size)[rank]", "X_all[rows], y_all[rows]")),
        "every world_size-th sample, not this rank's chunk (same parameters: equal parts)": changed(_FSDP_TRAIN, (
            "X_all[rows].chunk(world_size)[rank], y_all[rows].chunk(world_size)[rank]",
            "X_all[rows][rank::world_size], y_all[rows][rank::world_size]")),
    },
    "ex5_gradient_buckets": {
        "all-reduces each bucket after backward, in finish(): nothing overlaps":
            changed(_BUCKETS, ("            flat = torch.cat([p.grad.flatten() for p in self.buckets[index]])\n"
                               "            self.pending.append((dist.all_reduce(flat, async_op=True), flat, self.buckets[index]))\n",
                               "            self.pending.append(self.buckets[index])\n"),
                    ("        for handle, flat, bucket in self.pending:\n            handle.wait()\n",
                     "        for bucket in self.pending:\n            flat = torch.cat([p.grad.flatten() for p in bucket])\n"
                     "            dist.all_reduce(flat)\n")),
        "a blocking all-reduce in the hook (no async_op): backward waits for each bucket":
            changed(_BUCKETS, ("dist.all_reduce(flat, async_op=True), flat", "dist.all_reduce(flat), flat"),
                    ("            handle.wait()\n", "")),
        "sums, never divides by the world size": changed(_BUCKETS, ("            flat /= dist.get_world_size()\n", "")),
        "drops the last, partial bucket: its parameters are never averaged":
            changed(_BUCKETS, ("        if bucket:\n            self.buckets.append(bucket)\n", "")),
        "never waits for the all-reduces": changed(_BUCKETS, ("            handle.wait()\n", "")),
        "buckets in forward order: the first bucket fills last": changed(
            _BUCKETS, ("reversed([p for p in model.parameters() if p.requires_grad])",
                       "[p for p in model.parameters() if p.requires_grad]")),
        "closes a bucket only past its cap (more than bucket_cap)": changed(_BUCKETS, (">= bucket_cap", "> bucket_cap")),
        "one all-reduce per parameter, not per bucket": changed(_BUCKETS, (
            "            flat = torch.cat([p.grad.flatten() for p in self.buckets[index]])\n"
            "            self.pending.append((dist.all_reduce(flat, async_op=True), flat, self.buckets[index]))\n",
            "            for p in self.buckets[index]:\n"
            "                self.pending.append((dist.all_reduce(p.grad, async_op=True), p.grad.flatten(), [p]))\n")),
        "never resets the counts: the second backward sends nothing": changed(
            _BUCKETS, ("        self.pending, self.arrived = [], [0] * len(self.buckets)\n", "        self.pending = []\n")),
        "includes frozen parameters in the buckets": changed(
            _BUCKETS, ("reversed([p for p in model.parameters() if p.requires_grad])", "reversed(list(model.parameters()))")),
    },
}

ALSO_RIGHT = {}
