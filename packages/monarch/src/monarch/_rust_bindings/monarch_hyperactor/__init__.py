"""``monarch._rust_bindings.monarch_hyperactor``: the runtime's types, as Monarch's
extension names them.

Exists for Monarch compatibility only: it mirrors the layout of Monarch's internal
package so that imports Monarch's own examples and tests use keep working. Each module
re-exports public objects; import them from ``monarch``, ``monarch.actor``,
``monarch.job``, ``monarch.config`` or ``monarch.rdma``.
"""
