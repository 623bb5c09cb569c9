from dsdoctor.cli.main import main

raise SystemExit(main())
