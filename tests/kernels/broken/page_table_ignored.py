"""block_table ignored: a paged kernel that assumes row b's logical page m is physical page
b x pages + m, as if the pages were laid out in order. Right whenever the allocator happens to
hand pages out in order (a fresh engine's first requests), wrong once pages are freed and
reused; invisible to a contiguous cache."""

from __future__ import annotations

from _kernel import ALL_FEATURES, Kernel, bind_cache

EXPECTED = frozenset({"paged"})
PROTOCOL = "kernel"
LAYOUT = "bshd"
CAUSAL = "bottom_right"
LSE = "natural"
MASKED_ROWS = "zero"
DETERMINISTIC = True
FEATURES = ALL_FEATURES
PAGED = 4


class InOrderPages(Kernel):
    def physical_page(self, table, b, m):
        return b * table.shape[1] + m  # the bug: the table's entries are never read


attention, attention_with_cache, supports = bind_cache(InOrderPages, globals())

