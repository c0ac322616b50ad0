from cosmos_train.cli import main

main()
