"""dsdoctor: a doctor for DeepSpeed / Transformers / Accelerate training runs."""

__version__ = "0.1.0"
