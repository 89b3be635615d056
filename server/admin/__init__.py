"""The `eventq` command line and what it generates for operators (nginx site,
RabbitMQ definitions)."""
