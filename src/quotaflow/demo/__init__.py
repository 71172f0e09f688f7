"""``python -m quotaflow.demo`` (what ``make demo`` runs): the control plane, the gateway and the pipeline end to
end on embedded defaults. :mod:`~quotaflow.demo.main` holds the stages; :mod:`~quotaflow.demo.gateway_stage` and
:mod:`~quotaflow.demo.pipeline_stage` the live-traffic and Spark parts. Nothing in the product imports this package.
"""
