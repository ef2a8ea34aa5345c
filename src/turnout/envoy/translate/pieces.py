"""One graph cluster's or TLS secret's messages, as `translate` emits them (guarded, and for a
secret kept in the memo): shared by the full translation and its patch (`patch`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.envoy.translate.clusters import (
    has_load_assignment,
    translate_cluster,
    translate_load_assignment,
)
from turnout.envoy.translate.memo import TranslateMemo
from turnout.envoy.translate.options import TranslateOptions
from turnout.envoy.translate.routes import log_translation_failure
from turnout.envoy.translate.secrets import translate_secret
from turnout.graph.model import CABundle, Cluster, TLSSecret

__all__ = ["cluster_resources", "secret_message"]


def cluster_resources(
    cluster: Cluster, opts: TranslateOptions, ca_bundles: Mapping[str, CABundle]
) -> tuple[Any, Any] | None:
    """The Envoy cluster and (EDS) load assignment of one graph cluster, as `translate` emits
    them; None when even a bare cluster fails."""
    try:
        cla = translate_load_assignment(cluster) if has_load_assignment(cluster) else None
        return translate_cluster(cluster, opts, ca_bundles), cla
    except Exception as err:
        log_translation_failure(f"cluster {cluster.name!r}", err)
    # Routes may still name the cluster: a bare cluster without endpoints answers 503 for them
    # instead of leaving Envoy with a reference to nothing.
    try:
        bare = Cluster(cluster.name, cluster.namespace, cluster.service, cluster.port)
        return translate_cluster(bare, opts), translate_load_assignment(bare)
    except Exception:
        return None


def secret_message(secret: TLSSecret, memo: TranslateMemo) -> Any | None:
    """The SDS Secret of `secret` (None: it cannot be translated and is left out), kept in
    `memo` while `secret` is the very same object."""
    known = memo.secrets.get(secret)
    if known is not None:
        return known[0]
    try:
        message = translate_secret(secret)
    except Exception as err:
        # Only the exception type: the message could quote key material.
        log_translation_failure(f"secret {secret.name!r}", TypeError(type(err).__name__))
        message = None
    return memo.secrets.put(secret, (message,))[0]
