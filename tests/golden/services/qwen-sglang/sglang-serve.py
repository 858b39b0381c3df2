#!/usr/bin/env python3
# managed by gpuhosts — starts SGLang's server with the API key from the environment, so that the key is in
# neither the process's command line (/proc/PID/cmdline) nor its log.
import logging
import os
import runpy
import sys

key = os.environ.pop("GPUHOSTS_API_KEY", "")
admin_key = os.environ.pop("GPUHOSTS_ADMIN_API_KEY", "")
# Joined to their flags: a key may begin with "-" (the admin key is URL-safe base64), and argparse would take a
# separate word that does for another option and refuse the flag ("expected one argument").
if key:
    sys.argv.append("--api-key=" + key)
if admin_key:
    sys.argv.append("--admin-api-key=" + admin_key)
secrets = [value for value in (key, admin_key) if value]
if secrets:
    make_record = logging.getLogRecordFactory()

    def redacted(*args, **kwargs):
        record = make_record(*args, **kwargs)
        text = record.getMessage()
        if any(value in text for value in secrets):
            for value in secrets:
                text = text.replace(value, "[secret]")
            record.msg, record.args = text, None
        return record

    logging.setLogRecordFactory(redacted)
sys.argv[0] = "sglang.launch_server"
runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
