"""The suite's password hasher: PBKDF2-SHA256 at one iteration.

Django's default spends about half a second of CPU on every user a test makes and every
sign-in. The iteration count is written into each hash, so the web and worker processes a
test starts, on Django's default hashers, still check these passwords.
"""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2(PBKDF2PasswordHasher):
    iterations = 1
