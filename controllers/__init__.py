"""Companion controllers: ResourceClaim lifecycle, a scheduler that calls the solver service,
device-taint eviction, leader election (see docs/controllers.md).

Pure decisions live in ``claims``, ``scheduling`` and ``eviction`` (objects in, changes out);
``kube`` is the only module that talks to the API server; ``informer``, ``workqueue`` and
``runtime`` are the machinery the shells (``claim_controller``, ``scheduler``,
``eviction_controller``) share; ``manager`` and ``cli`` run them; ``rbac_calls`` lists every
API request made.
"""
