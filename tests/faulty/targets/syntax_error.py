def build(n_embd, n_head)
    return None
