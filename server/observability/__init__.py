"""What the server tells its operators: metrics, the delivery log and its files,
loop lag, and the observers that feed them."""
