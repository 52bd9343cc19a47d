"""The example provider `pixiv.daily-ranking` v1: daily chart snapshots with cached thumbnails."""
