from kedi.cli import main

main()
