"""Prefect flows that chain twinkle's stages: curation, rollout and scoring, and both together.

Flows are thin: each task calls one library class and MLflow logging goes through
``twinkle.tracking``. Import the flow objects from their modules (``flows.pipeline``...);
this package imports nothing heavy itself.

Example:
    >>> from flows.pipeline import pipeline_flow   # doctest: +SKIP
    >>> pipeline_flow()                            # doctest: +SKIP
"""
