"""The real data the tasks read: text (``corpus``), photographs (``images``), UCF-101's lists (``ucf101``) and
videos (``video``). Everything ships in ``assets/`` or is read from a user's path; nothing downloads."""
