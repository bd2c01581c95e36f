"""Test doubles and offline fixtures: a scripted engine, a random tiny Qwen2-VL, processors built in
code for every supported family (no hub).

Tests, benchmarks, examples and the ``snapshot``/``check`` commands use these; components
(processors, rewards, workflows, the engine, packaging) never import them
(``tests/test_architecture.py`` checks).
"""
