def run(ctx):
    return {}

def targets(r):
    return []
