"""Contexts that are not a caller's request never become, or stay, the
thread's current one: oslo.log would stamp their request id on the
thread's later, unrelated lines. Each check runs on a thread of its own,
which starts without a current context."""

import concurrent.futures

from cyborg import context as cyborg_context
from tests.placement_service import placement  # noqa: F401
from tests.placement_service import placement_schema_template  # noqa: F401


def on_a_fresh_thread(work):
    """``work()``, then the context left current, on a new thread."""
    def run():
        assert cyborg_context.current() is None
        return work(), cyborg_context.current()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result(timeout=60)


def test_the_services_own_context_is_not_made_current():
    made, left = on_a_fresh_thread(lambda: cyborg_context.admin_context(None))
    assert made.is_admin
    assert left is None


def test_an_in_process_placement_leaves_no_context_behind(
        placement):  # noqa: F811
    answer, left = on_a_fresh_thread(lambda: placement.adapter().get(
        '/resource_providers', microversion='1.39'))
    assert answer.status_code == 200
    # Placement's request made a context of its own, current while it ran.
    assert answer.headers['x-openstack-request-id'].startswith('req-')
    assert left is None


def test_a_current_context_is_kept():
    def work():
        caller = cyborg_context.RequestContext(request_id='req-caller')
        cyborg_context.admin_context(None)
        return caller
    caller, left = on_a_fresh_thread(work)
    assert left is caller
