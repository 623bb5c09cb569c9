from dsdoctor.cli.main import entry

entry()
