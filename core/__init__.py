"""The bottom layer: the data model and the contracts every component is written against.

Assembled traces and sessions, metric results, evaluator usage, component configs and
factories, the component lifecycle and the traces consumer. It imports nothing else of
spanscore; everything else imports it.
"""
