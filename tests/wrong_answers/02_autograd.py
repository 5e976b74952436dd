"""Notebook 02: plausible wrong answers (each must lose its exercise's points) and right answers other than the
solution (other readings of the statement, answers that write to stderr)."""

WRONG = {
    "ex1_manual_backward": {
        "the 1/N of the mean forgotten": '''
def manual_backward(x, y, W1, b1, W2, b2):
    h = torch.tanh(x @ W1 + b1)
    pred = h @ W2 + b2
    dpred = 2 * (pred - y)
    dpre = (dpred @ W2.T) * (1 - h ** 2)
    return {"W1": x.T @ dpre, "b1": dpre.sum(0), "W2": h.T @ dpred, "b2": dpred.sum(0)}
''',
        "the mean taken over the batch only": '''
def manual_backward(x, y, W1, b1, W2, b2):
    h = torch.tanh(x @ W1 + b1)
    pred = h @ W2 + b2
    dpred = 2 * (pred - y) / x.shape[0]
    dpre = (dpred @ W2.T) * (1 - h ** 2)
    return {"W1": x.T @ dpre, "b1": dpre.sum(0), "W2": h.T @ dpred, "b2": dpred.sum(0)}
''',
        "the chain rule skips tanh's derivative": '''
def manual_backward(x, y, W1, b1, W2, b2):
    h = torch.tanh(x @ W1 + b1)
    pred = h @ W2 + b2
    dpred = 2 * (pred - y) / pred.numel()
    dpre = dpred @ W2.T
    return {"W1": x.T @ dpre, "b1": dpre.sum(0), "W2": h.T @ dpred, "b2": dpred.sum(0)}
''',
        "the right numbers, but through autograd (torch.autograd.grad)": '''
def manual_backward(x, y, W1, b1, W2, b2):
    with torch.enable_grad():
        params = [p.detach().requires_grad_() for p in (W1, b1, W2, b2)]
        A, a, B, b = params
        loss = ((torch.tanh(x @ A + a) @ B + b - y) ** 2).mean()
        grads = torch.autograd.grad(loss, params)
    return dict(zip(["W1", "b1", "W2", "b2"], grads))
''',
        "the right numbers, but through loss.backward()": '''
def manual_backward(x, y, W1, b1, W2, b2):
    with torch.enable_grad():
        params = {k: p.detach().clone().requires_grad_() for k, p in zip(["W1", "b1", "W2", "b2"], (W1, b1, W2, b2))}
        h = torch.tanh(x @ params["W1"] + params["b1"])
        ((h @ params["W2"] + params["b2"] - y) ** 2).mean().backward()
    return {k: p.grad for k, p in params.items()}
''',
        # issue 40: refused by name, autograd's engine was reachable by another (14/14 then)
        "the right numbers, but through autograd's engine by another name (graph._engine_run_backward)": '''
def manual_backward(x, y, W1, b1, W2, b2):
    from torch.autograd.graph import _engine_run_backward
    with torch.enable_grad():
        params = [p.detach().clone().requires_grad_() for p in (W1, b1, W2, b2)]
        loss = ((torch.tanh(x @ params[0] + params[1]) @ params[2] + params[3] - y) ** 2).mean()
        _engine_run_backward((loss,), (torch.ones_like(loss),), False, False, (), True, True)
    return dict(zip(["W1", "b1", "W2", "b2"], [p.grad for p in params]))
''',
    },
    "ex2_central_difference": {
        "a forward difference": '''
def central_difference(f, x, eps=1e-6):
    grad = torch.empty_like(x).view(-1)
    for i in range(x.numel()):
        step = torch.zeros(x.numel(), dtype=x.dtype)
        step[i] = eps
        grad[i] = (f(x + step.view_as(x)) - f(x)) / eps
    return grad.view_as(x)
''',
        "divided by eps instead of 2 eps": '''
def central_difference(f, x, eps=1e-6):
    grad = torch.empty_like(x).view(-1)
    for i in range(x.numel()):
        step = torch.zeros(x.numel(), dtype=x.dtype)
        step[i] = eps
        grad[i] = (f(x + step.view_as(x)) - f(x - step.view_as(x))) / eps
    return grad.view_as(x)
''',
        "the gradient built in the default float32, not in x's dtype": '''
def central_difference(f, x, eps=1e-6):
    grad = torch.zeros(x.numel())
    for i in range(x.numel()):
        step = torch.zeros(x.numel(), dtype=x.dtype)
        step[i] = eps
        grad[i] = (f(x + step.view_as(x)) - f(x - step.view_as(x))) / (2 * eps)
    return grad.view_as(x)
''',
        "eps ignored: a fixed step of 1e-6": '''
def central_difference(f, x, eps=1e-6):
    grad = torch.empty_like(x).view(-1)
    for i in range(x.numel()):
        step = torch.zeros(x.numel(), dtype=x.dtype)
        step[i] = 1e-6
        grad[i] = (f(x + step.view_as(x)) - f(x - step.view_as(x))) / 2e-6
    return grad.view_as(x)
''',
        "x perturbed in place and left changed": '''
def central_difference(f, x, eps=1e-6):
    grad = torch.empty_like(x)
    flat, g = x.view(-1), grad.view(-1)
    for i in range(x.numel()):
        flat[i] += eps
        up = f(x)
        flat[i] -= 2 * eps
        down = f(x)
        g[i] = (up - down) / (2 * eps)
    return grad
''',
    },
    "ex3_gelu": {
        "√2 as a one-element CPU tensor: works on the CPU only": '''
class GELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1 + torch.erf(x / torch.tensor([math.sqrt(2)], dtype=x.dtype)))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        cdf = 0.5 * (1 + torch.erf(x / torch.tensor([math.sqrt(2)], dtype=x.dtype)))
        pdf = torch.exp(-0.5 * x ** 2) / math.sqrt(2 * math.pi)
        return grad_output * (cdf + x * pdf)


gelu = GELU.apply
''',
        "backward forgets the x·φ(x) term": '''
class GELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1 + torch.erf(x / math.sqrt(2)))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 0.5 * (1 + torch.erf(x / math.sqrt(2)))


gelu = GELU.apply
''',
        "backward computed from a detached input, so not twice differentiable": '''
class GELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1 + torch.erf(x / math.sqrt(2)))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        x = x.detach()
        cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
        pdf = torch.exp(-0.5 * x ** 2) / math.sqrt(2 * math.pi)
        return grad_output * (cdf + x * pdf)


gelu = GELU.apply
''',
        "backward differentiates F.gelu with autograd instead of by hand": '''
class GELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.gelu(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            leaf = x if x.requires_grad else x.detach().requires_grad_()
            (grad,) = torch.autograd.grad(F.gelu(leaf), leaf, grad_output, create_graph=True)
        return grad


gelu = GELU.apply
''',
        "the density φ without its 1/√(2π)": '''
class GELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1 + torch.erf(x / math.sqrt(2)))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (0.5 * (1 + torch.erf(x / math.sqrt(2))) + x * torch.exp(-0.5 * x ** 2))


gelu = GELU.apply
''',
    },
    "ex4_gelu_tanh": {
        "the chain rule stops at tanh: the cubic's derivative forgotten": '''
class GELUTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        k = math.sqrt(2 / math.pi)
        t = torch.tanh(k * (x + 0.044715 * x ** 3))
        return grad_output * (0.5 * (1 + t) + 0.5 * x * (1 - t ** 2) * k)


gelu_tanh = GELUTanh.apply
''',
        "backward differentiates F.gelu(approximate='tanh') with autograd instead of by hand": '''
class GELUTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.gelu(x, approximate="tanh")

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            leaf = x.detach().requires_grad_()
            (grad,) = torch.autograd.grad(F.gelu(leaf, approximate="tanh"), leaf, grad_output)
        return grad


gelu_tanh = GELUTanh.apply
''',
        "the exact erf GELU instead of the tanh formula": '''
class GELUTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 0.5 * (1 + torch.erf(x / math.sqrt(2)))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (0.5 * (1 + torch.erf(x / math.sqrt(2))) + x * torch.exp(-0.5 * x ** 2) / math.sqrt(2 * math.pi))


gelu_tanh = GELUTanh.apply
''',
    },
}

# issue 40: tricks that won under the tests of 2026-11-27, each on a catalogued answer above
_BY_AUTOGRAD = WRONG["ex3_gelu"]["backward differentiates F.gelu with autograd instead of by hand"]
# the hidden tests read the visible test's refusal, which the answer could bind again (full marks then)
WRONG["ex3_gelu"]["backward by autograd, the answer binding the tests' refusals to nothing (_NO_AUTOGRAD, refused, "
                  "no_autograd)"] = '''
import contextlib
_NO_AUTOGRAD = ("",)
refused = no_autograd = lambda *args, **kwargs: contextlib.nullcontext()
''' + _BY_AUTOGRAD
# gradcheck's verdict was an assert in the kernel, after the cell's last value: an answer whose cell error was cleared
# away kept its points then; every verdict is now a value the grader judges
WRONG["ex3_gelu"]["backward left as released, the display its tests' values leave by clearing the cell's error first"] = '''
import IPython.display

_display = IPython.display.display


def _cleared(*args, **kwargs):  # as the values go out at the cell's end, the error shown before them goes
    if "gelu_tanh" not in get_ipython().user_ns["In"][-1]:  # exercise 4's cells (and the rest) as they were
        IPython.display.clear_output()
    return _display(*args, **kwargs)


IPython.display.display = _cleared
''' + _BY_AUTOGRAD[:_BY_AUTOGRAD.index("        (x,) = ctx.saved_tensors")] + """        raise NotImplementedError()


gelu = GELU.apply
"""

ALSO_RIGHT = {
    "ex1_manual_backward": {
        "prints the shapes to stderr": '''
import sys

def manual_backward(x, y, W1, b1, W2, b2):
    h = torch.tanh(x @ W1 + b1)
    pred = h @ W2 + b2
    print("shapes", tuple(x.shape), tuple(pred.shape), file=sys.stderr)
    dpred = 2 * (pred - y) / pred.numel()
    dpre = (dpred @ W2.T) * (1 - h ** 2)
    return {"W1": x.T @ dpre, "b1": dpre.sum(0), "W2": h.T @ dpred, "b2": dpred.sum(0)}
''',
    },
    "ex2_central_difference": {
        "warns that it is slow": '''
def central_difference(f, x, eps=1e-6):
    warnings.warn(f"central differences call f {2 * x.numel()} times")
    grad = torch.empty_like(x).view(-1)
    for i in range(x.numel()):
        step = torch.zeros(x.numel(), dtype=x.dtype)
        step[i] = eps
        grad[i] = (f(x + step.view_as(x)) - f(x - step.view_as(x))) / (2 * eps)
    return grad.view_as(x)
''',
    },
}
