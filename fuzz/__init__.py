"""Fuzzing of the whole dissector and of each sans-IO stage (issue 14).

Input: the sample captures in pcaps/ (and the raw streams in pcaps/streams/) as seeds.
Output: `python -m fuzz.campaign` runs a seeded, reproducible campaign and writes its report;
tests/test_fuzz_pipeline.py runs the same generators under Hypothesis in `make test`.
Rule: every input is made from (campaign seed, level, index) alone by the structure-aware
mutators of `fuzz.mutators`, so any failure is reproduced with `--replay LEVEL:SEED:INDEX`;
the invariants checked on each input live in `fuzz.targets`.
"""
