"""A reward module that writes bytes that are not UTF-8 to every descriptor when it is imported."""
from adversarial_rewards import junk_at_import_fds

junk_at_import_fds()


def fn(resp, ans):
    return 1.0
