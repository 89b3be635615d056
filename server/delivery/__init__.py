"""Delivery: the notify-queue consumer, the event log as this process reads it,
and what parked long polls share."""
