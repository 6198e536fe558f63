"""A frozen copy of progressive filling as it was before issue 28 (main at 2f2f05e): the
loop (`filling.py`), the selectors (`selection.py`), tie rules (`ties.py`) and best fit
(`bestfit.py`, `bestfit_index.py`) and TSF (`tsf.py`, whose y_n the fill now computes
faster; `filling.py` swaps it in for the project's), copied verbatim but for their imports.
The other criteria and `AllocationState` are the project's own.

`tests/test_fill_equivalence.py` checks that `allocator.filling.progressive_fill` makes
exactly the grants this one makes, in the same order, on random instances. Do not edit it
to follow a change of the fill: a change of decisions is what it is there to catch.
"""
