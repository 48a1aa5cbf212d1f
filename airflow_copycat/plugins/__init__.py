"""Copycat in the Airflow UI: the offsets page (an Airflow plugin served by the API server).

* :mod:`.offsets_plugin` -- the :class:`~airflow_copycat.plugins.offsets_plugin.CopycatOffsetsPlugin`
  (a FastAPI app at ``/copycat`` and a "Copycat offsets" entry in the Browse menu);
* :mod:`.offsets_app` -- its routes, authentication and authorisation, and the change request;
* :mod:`.overview` -- what the page shows; :mod:`.page` -- the HTML;
* :mod:`.catalog` -- what the metadata database knows (connectors, their DAGs, last moves, runs);
* :mod:`.lag` -- a sink's consumer lag.

The Airflow layer: these modules import Airflow (the API server's parts only inside the app).
"""
