"""Pure appliers: how each event type changes the state sections it touches.

An applier must give the right result when its change is already in the
fetched state (the event landed between queue creation and the fetch):
replace, set, or insert-if-absent; never increment or append blindly.
"""
