"""Third-party code kept verbatim (each file's header says where from, at which commit, and
under which license), for subjects whose library does not ship it."""
