from dsdoctor.cli import main

raise SystemExit(main())
