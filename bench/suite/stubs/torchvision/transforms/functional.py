def to_tensor(*a, **k):
    raise RuntimeError("torchvision stub: to_tensor is not available")
