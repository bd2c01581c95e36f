"""The tiny Qwen2-VL-architecture model that ships in ``assets/`` and the code that builds it."""
