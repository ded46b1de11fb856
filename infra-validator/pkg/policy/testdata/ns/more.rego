package team.b

warn contains {"msg": "team b warns", "resource": "thing/1"}
