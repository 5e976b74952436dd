"""Notebook 06: plausible wrong answers (each must lose its exercise's points)."""

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
    },
    "ex2_ddp_train": {
        "forgets sampler.set_epoch: every epoch repeats the first one's order": _ddp(set_epoch="pass"),
        "every rank reads the whole data set (a sampler for one replica)":
            _ddp(sampler="DistributedSampler(train_data, num_replicas=1, rank=0, shuffle=True, seed=seed)"),
        "returns the DDP wrapper's state_dict (keys start with module.)": _ddp(result="model"),
        "counts epochs, not steps: runs whole epochs": _ddp().replace("            if done == steps:\n                break\n", ""),
        "samples_per_s of this rank alone": _ddp().replace("steps * per_rank_batch * world_size / seconds", "steps * per_rank_batch / seconds"),
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
    },
}

NOISY_BUT_RIGHT = {}
