import sqlite3
db = sqlite3.connect(":memory:", isolation_level=None)
db.enable_load_extension(True); db.load_extension("/tmp/revF/redlock.so")
def q(s):
    try: r=db.execute(s).fetchall(); print("OK ", s, "->", r)
    except Exception as e: print("ERR", s, "->", str(e)[:160])
q("DELETE FROM redlock_nodes")
q("INSERT INTO redlock_nodes(id,url) VALUES (1,'redis://app:s3cret@127.0.0.1:16391')")
q("SELECT redlock_ping()"); q("SELECT id,username,state,last_error FROM redlock_nodes")
for u in ("admin","ops"):
    q(f"UPDATE redlock_nodes SET username='{u}' WHERE id=1")
    q("SELECT redlock_ping()"); q("SELECT id,username,password,state,last_error FROM redlock_nodes")
