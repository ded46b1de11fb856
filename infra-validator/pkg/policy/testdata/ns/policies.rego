package team.a

deny contains "team a says no"
