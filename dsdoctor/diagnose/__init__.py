"""Diagnosis: the rules engine, the checks, the fixes, the analysis pipeline."""
