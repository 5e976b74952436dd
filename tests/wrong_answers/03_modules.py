"""Notebook 03: plausible wrong answers (each must lose its exercise's points) and right answers other than the
solution (other readings of the statement, answers that write to stderr)."""

WRONG = {
    "ex1_glu": {
        "gates the wrong half: the first half through the sigmoid": '''
class GLU(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.proj = nn.Linear(in_features, 2 * out_features, bias=bias)

    def forward(self, x):
        gate, value = self.proj(x).chunk(2, dim=-1)
        return value * torch.sigmoid(gate)
''',
        "tanh instead of sigmoid for the gate": '''
class GLU(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.proj = nn.Linear(in_features, 2 * out_features, bias=bias)

    def forward(self, x):
        value, gate = self.proj(x).chunk(2, dim=-1)
        return value * torch.tanh(gate)
''',
        "splits along dim 1: right only for a batch of vectors": '''
class GLU(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.proj = nn.Linear(in_features, 2 * out_features, bias=bias)

    def forward(self, x):
        value, gate = self.proj(x).chunk(2, dim=1)
        return value * torch.sigmoid(gate)
''',
        "bias argument ignored": '''
class GLU(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.proj = nn.Linear(in_features, 2 * out_features)

    def forward(self, x):
        return F.glu(self.proj(x), dim=-1)
''',
    },
    "ex2_count_parameters": {
        "counts tied weights twice": '''
def count_parameters(model, trainable_only=True):
    return sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False) if p.requires_grad or not trainable_only)
''',
        "counts each module's own parameters: a tied weight once per module": '''
def count_parameters(model, trainable_only=True):
    return sum(p.numel() for m in model.modules() for p in m.parameters(recurse=False) if p.requires_grad or not trainable_only)
''',
        "ignores trainable_only": '''
def count_parameters(model, trainable_only=True):
    return sum(p.numel() for p in model.parameters())
''',
        "counts the buffers too": '''
def count_parameters(model, trainable_only=True):
    params = sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
    return params + sum(b.numel() for b in model.buffers())
''',
        "sums the state_dict: buffers and tied copies included": '''
def count_parameters(model, trainable_only=True):
    return sum(t.numel() for t in model.state_dict().values())
''',
    },
    "ex3_capture_activations": {
        "leaves its hooks registered": '''
def capture_activations(model, x, layer_type=nn.Linear):
    captured = {}
    for name, m in model.named_modules():
        if isinstance(m, layer_type):
            m.register_forward_hook(lambda module, inputs, output, name=name: captured.__setitem__(name, output.detach().clone()))
    model(x)
    return captured
''',
        "removes the hooks, but not when the forward pass raises (no try/finally)": '''
def capture_activations(model, x, layer_type=nn.Linear):
    captured = {}
    handles = [m.register_forward_hook(lambda module, inputs, output, name=name: captured.__setitem__(name, output.detach().clone()))
               for name, m in model.named_modules() if isinstance(m, layer_type)]
    model(x)
    for handle in handles:
        handle.remove()
    return captured
''',
        "stores the outputs themselves, neither detached nor cloned": '''
def capture_activations(model, x, layer_type=nn.Linear):
    captured = {}
    handles = [m.register_forward_hook(lambda module, inputs, output, name=name: captured.__setitem__(name, output))
               for name, m in model.named_modules() if isinstance(m, layer_type)]
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return captured
''',
        "detaches without cloning: an in-place op afterwards changes the stored output": '''
def capture_activations(model, x, layer_type=nn.Linear):
    captured = {}
    handles = [m.register_forward_hook(lambda module, inputs, output, name=name: captured.__setitem__(name, output.detach()))
               for name, m in model.named_modules() if isinstance(m, layer_type)]
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return captured
''',
        "calls model.forward(x), so the root module's hook never runs": '''
def capture_activations(model, x, layer_type=nn.Linear):
    captured = {}
    handles = [m.register_forward_hook(lambda module, inputs, output, name=name: captured.__setitem__(name, output.detach().clone()))
               for name, m in model.named_modules() if isinstance(m, layer_type)]
    try:
        model.forward(x)
    finally:
        for handle in handles:
            handle.remove()
    return captured
''',
        "keeps the first output of a module called twice": '''
def capture_activations(model, x, layer_type=nn.Linear):
    captured = {}
    def keep_first(name):
        def hook(module, inputs, output):
            if name not in captured:
                captured[name] = output.detach().clone()
        return hook

    handles = [m.register_forward_hook(keep_first(name)) for name, m in model.named_modules() if isinstance(m, layer_type)]
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return captured
''',
        "swallows the forward pass's exception": '''
def capture_activations(model, x, layer_type=nn.Linear):
    captured = {}
    handles = [m.register_forward_hook(lambda module, inputs, output, name=name: captured.__setitem__(name, output.detach().clone()))
               for name, m in model.named_modules() if isinstance(m, layer_type)]
    try:
        model(x)
    except Exception:
        pass
    finally:
        for handle in handles:
            handle.remove()
    return captured
''',
        "runs the forward pass twice: once without hooks to check it works": '''
def capture_activations(model, x, layer_type=nn.Linear):
    captured = {}
    with torch.no_grad():
        model(x)
    handles = [m.register_forward_hook(lambda module, inputs, output, name=name: captured.__setitem__(name, output.detach().clone()))
               for name, m in model.named_modules() if isinstance(m, layer_type)]
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return captured
''',
        "clears every forward hook afterwards, the model's own included": '''
def capture_activations(model, x, layer_type=nn.Linear):
    captured = {}
    for name, m in model.named_modules():
        if isinstance(m, layer_type):
            m.register_forward_hook(lambda module, inputs, output, name=name: captured.__setitem__(name, output.detach().clone()))
    try:
        model(x)
    finally:
        for m in model.modules():
            m._forward_hooks.clear()
    return captured
''',
        "matches the exact type, missing subclasses of layer_type": '''
def capture_activations(model, x, layer_type=nn.Linear):
    captured = {}
    handles = [m.register_forward_hook(lambda module, inputs, output, name=name: captured.__setitem__(name, output.detach().clone()))
               for name, m in model.named_modules() if type(m) is layer_type]
    try:
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return captured
''',
    },
    "ex4_standardize": {
        "std stored as a plain tensor attribute": '''
class Standardize(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean)
        self.std = std

    def forward(self, x):
        return (x - self.mean) / self.std
''',
        "mean and std registered as nn.Parameter": '''
class Standardize(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean = nn.Parameter(mean, requires_grad=False)
        self.std = nn.Parameter(std, requires_grad=False)

    def forward(self, x):
        return (x - self.mean) / self.std
''',
        "buffers registered with persistent=False: never saved": '''
class Standardize(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean, persistent=False)
        self.register_buffer("std", std, persistent=False)

    def forward(self, x):
        return (x - self.mean) / self.std
''',
    },
}

ALSO_RIGHT = {
    "ex1_glu": {
        "warns with warnings.warn on every forward pass": '''
import warnings

class GLU(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.proj = nn.Linear(in_features, 2 * out_features, bias=bias)

    def forward(self, x):
        warnings.warn(f"GLU input shape {tuple(x.shape)}")
        return F.glu(self.proj(x), dim=-1)
''',
    },
    "ex2_count_parameters": {
        "prints debugging output to stderr": '''
import sys

def count_parameters(model, trainable_only=True):
    params = [p for p in model.parameters() if p.requires_grad or not trainable_only]
    print("debug:", len(params), "parameter tensors", file=sys.stderr)
    return sum(p.numel() for p in params)
''',
    },
}
