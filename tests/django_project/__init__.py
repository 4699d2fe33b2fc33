"""A Django project on vsqs.django for tests/test_django*.py: settings from
environment variables, a tasks module, manage.py and a client script."""
