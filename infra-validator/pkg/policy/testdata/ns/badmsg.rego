package team.c

deny contains {"message": "no msg field"}
